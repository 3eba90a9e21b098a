"""The one Registry helper (layers, losses, rec cells): names, aliases, did-you-mean, lazy loading."""

import pytest

from returnn_lite.registry import Registry


def test_registry_aliases_did_you_mean_lazy():
    loaded = []
    reg = Registry("thing", lazy_load=lambda: loaded.append(1) or reg.register("alpha", 1, aliases=("a",)))
    assert not loaded
    assert reg.get("a") == 1 and reg.get("alpha") == 1
    assert loaded == [1]  # loaded once, on the first lookup
    assert reg.names() == ["alpha"]
    with pytest.raises(ValueError, match="unknown thing 'alpah'. Did you mean 'alpha'"):
        reg.get("alpah")


def test_registries_in_use():
    from returnn_lite.layers import get_layer_class
    from returnn_lite.layers.rec.cells import get_cell_class
    from returnn_lite.losses import get_loss_class

    assert get_layer_class("linear").layer_class == "linear"
    assert get_loss_class("ce").class_name == "ce"
    assert get_cell_class("LSTMBlock") is get_cell_class("lstm_block_cell")
    with pytest.raises(ValueError, match="Did you mean 'linear'"):
        get_layer_class("linaer")
    with pytest.raises(ValueError, match="unknown loss 'cee'.*Did you mean 'ce'"):
        get_loss_class("cee")
    with pytest.raises(ValueError, match="unknown cell unit 'lstn'"):
        get_cell_class("lstn")
