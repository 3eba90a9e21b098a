"""Config loading, accessors, ++overrides, errors with file:line, global config, and the returnn import shim."""

import sys
import types

import pytest

from returnn_lite.config import Config, ConfigError, get_global_config, global_config_ctx, set_global_config


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_python_config_values_and_functions(tmp_path):
    fn = _write(tmp_path, "a.config", "#!rnn.py\nimport os\nnum_epochs = 3\nlr = 0.1\n"
                                      "net = {'out': {'class': 'copy'}}\n"
                                      "_private = 1\ndef get_epochs():\n    return num_epochs\n")
    config = Config()
    config.load_file(fn)
    assert config.int("num_epochs") == 3 and config.float("lr") == 0.1
    assert config.typed_value("net") == {"out": {"class": "copy"}}
    assert "os" not in config.keys() and "_private" in config.typed_dict
    assert config.has("num_epochs") and not config.has("nope")
    assert config.files == [fn]
    # ++ overrides are seen by config functions through their globals
    config.parse_cmd_args(["++num_epochs", "7"])
    assert config.typed_value("get_epochs")() == 7


def test_python_without_marker_and_py_suffix(tmp_path):
    config = Config()
    config.load_file(_write(tmp_path, "b.config", "x = [1, 2]\n"))
    config.load_file(_write(tmp_path, "c.py", "y = 'z'\n"))
    assert config.typed_value("x") == [1, 2] and config.value("y") == "z"


def test_line_format_and_json(tmp_path):
    config = Config()
    config.load_file(_write(tmp_path, "old.config", "# comment\ntask train\nnum_epochs 5  # trailing\nlrs 0.1,0.2\n"))
    assert config.value("task") == "train" and config.int("num_epochs") == 5
    assert config.list("lrs") == ["0.1", "0.2"] and config.float_list("lrs") == [0.1, 0.2]
    assert config.value("lrs") == "0.1,0.2" and config.typed_value("num_epochs") == 5
    config.load_file(_write(tmp_path, "j.json", '{"a": 1, "b": [true, null]}'))
    assert config.typed_value("a") == 1 and config.typed_value("b") == [True, None]


def test_accessors():
    config = Config({"i": 3, "f": "2.5", "si": "4.0", "b": True, "s": "yes", "l": (1, 2), "p": "3:4", "q": 5, "n": None})
    assert config.int("i") == 3 and config.int("missing", 9) == 9
    assert config.float("f") == 2.5 and config.int("si") == 4
    assert config.bool("b") is True and config.bool("s") is True and config.is_true("missing") is False
    assert config.is_true("missing", True) is True
    assert config.list("l") == [1, 2] and config.list("i") == [3] and config.list("missing") is None
    assert config.value("l") == "1,2" and config.value("n", "dflt") == "dflt"
    assert config.int_pair("p") == (3, 4) and config.int_pair("q") == (5, 5) and config.int_pair("l") == (1, 2)
    assert config.opt_typed_value("i") == 3 and config.typed_value("missing", "d") == "d"
    config.set("i", 4)
    assert config.int("i") == 4
    with pytest.raises(ConfigError):
        Config({"x": "maybe"}).bool("x")


def test_parse_cmd_args():
    config = Config({"flag": False, "name": "abc", "n": 1})
    rest = config.parse_cmd_args(["my.config", "++n", "5", "++flag", "true", "++name", "123", "++new", "[1, 2]",
                                  "++word", "hello", "++eq=0.5", "--other"])
    assert rest == ["my.config", "--other"]
    assert config.typed_value("n") == 5 and config.typed_value("flag") is True
    assert config.typed_value("name") == "123"  # a string option stays a string
    assert config.typed_value("new") == [1, 2] and config.value("word") == "hello"
    assert config.float("eq") == 0.5
    with pytest.raises(ConfigError, match="needs a value"):
        config.parse_cmd_args(["++dangling"])


@pytest.mark.parametrize("text, lineno", [
    ("#!rnn.py\nx = 1\ny = [1,\n", 3),  # syntax error
    ("#!rnn.py\nx = 1\n\nz = undefined_name\n", 4),  # runtime error
    ("#!rnn.py\ndef f():\n    return 1 / 0\n\nv = f()\n", 3),  # error inside a config function
])
def test_config_error_names_file_and_line(tmp_path, text, lineno):
    fn = _write(tmp_path, "bad.config", text)
    with pytest.raises(ConfigError) as exc_info:
        Config().load_file(fn)
    assert exc_info.value.filename == fn and exc_info.value.lineno == lineno
    assert "%s:%i" % (fn, lineno) in str(exc_info.value)


def test_config_error_missing_and_bad_lines(tmp_path):
    with pytest.raises(ConfigError, match="not found.*nope.config"):
        Config().load_file(str(tmp_path / "nope.config"))
    fn = _write(tmp_path, "lines.config", "task train\nbroken\n")
    with pytest.raises(ConfigError, match=r"lines.config:2"):
        Config().load_file(fn)


def test_global_config():
    prev = get_global_config(raise_exception=False)
    try:
        set_global_config(None)
        with pytest.raises(ConfigError):
            get_global_config()
        assert get_global_config(raise_exception=False) is None
        a, b = Config(), Config()
        set_global_config(a)
        with global_config_ctx(b):
            assert get_global_config() is b
        assert get_global_config() is a
    finally:
        set_global_config(prev)


def _returnn_modules():
    return sorted(name for name in sys.modules if name == "returnn" or name.startswith("returnn."))


def test_import_shim_basic(tmp_path):
    fn = _write(tmp_path, "shim.config", "#!rnn.py\n"
                "from returnn.config import get_global_config\n"
                "from returnn.util.basic import get_login_username, NotSpecified\n"
                "import returnn.util.basic as rub\n"
                "me = get_global_config()\n"
                "user = get_login_username()\n"
                "ns = NotSpecified\n")
    meta_path_before = list(sys.meta_path)
    config = Config()
    config.load_file(fn)
    assert config.typed_value("me") is config
    assert isinstance(config.typed_value("user"), str) and not config.typed_value("ns")
    assert _returnn_modules() == [] and sys.meta_path == meta_path_before


def test_import_shim_unknown_module(tmp_path):
    fn = _write(tmp_path, "u.config", "#!rnn.py\nx = 1\nfrom returnn.tf.util.ken_lm import ken_lm_load\n")
    with pytest.raises(ConfigError, match=r"u.config:3.*returnn.tf.util.ken_lm"):
        Config().load_file(fn)
    assert _returnn_modules() == []


def test_import_shim_keeps_real_returnn(tmp_path):
    fake = types.ModuleType("returnn")
    fake.__path__ = []
    sys.modules["returnn"] = fake
    try:
        fn = _write(tmp_path, "r.config", "#!rnn.py\nimport returnn\nfrom returnn.config import Config as C\n"
                                          "is_fake = hasattr(returnn, 'REAL')\n")
        fake.REAL = True
        config = Config()
        config.load_file(fn)
        assert config.typed_value("C") is Config and config.typed_value("is_fake") is False
        assert sys.modules["returnn"] is fake and _returnn_modules() == ["returnn"]
    finally:
        del sys.modules["returnn"]


def test_import_shim_dims(tmp_path):
    pytest.importorskip("returnn_lite.data")
    fn = _write(tmp_path, "dims.config", "#!rnn.py\n"
                "from returnn.tf.util.data import Dim, SpatialDim, FeatureDim, batch_dim\n"
                "from returnn.tensor import Tensor, single_step_dim\n"
                "from returnn.config import get_global_config\n"
                "time_dim = SpatialDim('time')\n"
                "feature_dim = FeatureDim('feature', 9)\n"
                "extern_data = {'data': {'dim_tags': [batch_dim, time_dim, feature_dim]}}\n")
    config = Config()
    config.load_file(fn)
    import returnn_lite.data as data_mod

    assert config.typed_value("Dim") is data_mod.Dim
    assert isinstance(config.typed_value("feature_dim"), data_mod.Dim)
    assert config.typed_value("extern_data")["data"]["dim_tags"][0] is data_mod.batch_dim
    assert _returnn_modules() == []
