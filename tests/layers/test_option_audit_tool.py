"""tools/audit_layer_options.py: every layer class and option the seeds document (and the listed options of the
current original) is known to returnn_lite: accepted (honoured or declared without effect) or refused by name."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import audit_layer_options  # noqa: E402


def test_parse_seed_signatures():
    classes = audit_layer_options.parse_seed_classes(os.path.join(
        audit_layer_options.DEFAULT_SEEDS, [f for f in os.listdir(audit_layer_options.DEFAULT_SEEDS)
                                            if f.startswith("001_")][0]))
    by_name = {(kind, name): (opts, required) for _, kind, name, opts, required in classes}
    assert by_name[("layer", "linear")][0] == ["activation", "with_bias", "grad_filter", "forward_weights_init",
                                               "bias_init", "use_transposed_weights"]
    assert by_name[("layer", "gather")][1] == ["position", "axis"]
    assert "label_smoothing" in by_name[("loss", "ce")][0]


def test_no_documented_class_or_option_unknown():
    lines, counts = audit_layer_options.audit(audit_layer_options.DEFAULT_SEEDS)
    assert counts["layer classes"] >= 79 and counts["loss classes"] >= 18 and counts["options checked"] > 500
    assert counts["missing classes"] == 0, "\n".join(lines)
    assert counts["not accepted"] == 0, "\n".join(line for line in lines if "not accepted" in line)


def test_no_layer_option_only_stored():
    """An option stored as self.X with X read nowhere (and not declared refused / without effect) is dropped."""
    from returnn_lite.layers.base import LayerBase, layer_registry

    found = {name: audit_layer_options.stored_unused(cls, LayerBase) for name, cls in layer_registry.items()
             if isinstance(cls, type)}
    assert not {k: v for k, v in found.items() if v}
