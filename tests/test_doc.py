"""``python -m returnn_lite.doc LAYER``: a layer's options with defaults and docs, from the code."""

import inspect
import subprocess
import sys

from returnn_lite.doc import format_layer_doc, main, option_docs
from returnn_lite.layers.base import ConcatInputLayer, CopyLayer, LayerBase


def test_format_layer_doc_linear():
    text = format_layer_doc("linear")
    assert "layer class 'linear'" in text
    assert "with_bias" in text and "default True" in text
    assert "param_variational_noise" in text and "stddev of Gaussian noise" in text
    assert "mask" in text and "refused unless None" in text


def test_common_options_documented():
    """Every option of LayerBase, ConcatInputLayer and copy has a one-line doc."""
    for cls in (LayerBase, ConcatInputLayer, CopyLayer):
        docs = option_docs(cls)
        params = [p for p in inspect.signature(cls.__init__).parameters.values()
                  if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("self", "name", "network", "output",
                                                                          "sources")]
        missing = [p.name for p in params if p.name not in docs]
        assert not missing, (cls.__name__, missing)


def test_doc_cli(capsys):
    assert main(["copy"]) == 0
    assert "extra_deps" in capsys.readouterr().out
    assert main(["linaer"]) == 1
    assert "Did you mean 'linear'" in capsys.readouterr().err


def test_doc_module_runs():
    proc = subprocess.run([sys.executable, "-m", "returnn_lite.doc", "softmax"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "layer class 'softmax'" in proc.stdout
