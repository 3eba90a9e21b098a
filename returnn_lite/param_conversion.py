"""
Param layout conversions on plain numpy values, shared by CustomCheckpointLoader (automatic conversions when a
checkpoint's layout differs from the network's) and the checkpoint tool (``convert``).

LSTM layouts (``P`` is the param prefix of the rec layer, e.g. ``lstm/rec/``):

=============  ===========================================================  ==========  ===========
layout         params                                                       gate order  forget_bias
=============  ===========================================================  ==========  ===========
native         P W [n_in, 4n], P W_re [n, 4n], P b [4n]                      j i f o     none
               (units nativelstm2, nativelstm, lstm, lstmp, vanillalstm)
standardlstm   P lstm_cell/kernel [n_in + n, 4n], P lstm_cell/bias [4n]      i j f o     1.0 at run time
               (TF LSTMCell)
basiclstm      P basic_lstm_cell/kernel, P basic_lstm_cell/bias               i j f o     1.0 at run time
lstmblock      P lstm_cell/kernel, P lstm_cell/bias (TF LSTMBlockCell; also   i j f o     1.0 at run time
               read from P lstm_block_cell/...)
keras          P lstm_cell/kernel [n_in, 4n], P lstm_cell/recurrent_kernel    i f c o     none
               [n, 4n], P lstm_cell/bias [4n] (Keras LSTM)
=============  ===========================================================  ==========  ===========

(j = c = the cell input.) Conversions go through one canonical form: input kernel, recurrent kernel and bias in
gate order (i, j, f, o) with the run-time forget bias folded into the bias. Batch norm params of param_version
0 (``batch_norm/<prefix>_mean``, broadcast shape), 1 (``batch_norm/mean``, broadcast shape) and 2
(``batch_norm/v2_mean``, shape [dim]) convert into each other by name and reshape.
"""

from __future__ import annotations

import re

import numpy as np

NATIVE_UNITS = ("nativelstm2", "nativelstm", "lstm", "lstmp", "vanillalstm", "nativelstmlowmem", "native")


class LstmLayout:
    def __init__(self, name, scope, names, order, forget_bias, merged, read_scopes=()):
        self.name = name
        self.scope = scope  # below P, e.g. "lstm_cell/"
        self.names = names  # (input kernel or merged kernel, recurrent kernel or None, bias)
        self.order = order
        self.default_forget_bias = forget_bias
        self.merged = merged
        self.read_scopes = (scope,) + tuple(read_scopes)

    def param_names(self, prefix, scope=None):
        scope = self.scope if scope is None else scope
        return [prefix + scope + n for n in self.names if n]

    def __repr__(self):
        return "LstmLayout(%s)" % self.name


LSTM_LAYOUTS = {
    "native": LstmLayout("native", "", ("W", "W_re", "b"), "jifo", 0.0, merged=False),
    "standardlstm": LstmLayout("standardlstm", "lstm_cell/", ("kernel", None, "bias"), "ijfo", 1.0, merged=True),
    "basiclstm": LstmLayout("basiclstm", "basic_lstm_cell/", ("kernel", None, "bias"), "ijfo", 1.0, merged=True),
    "lstmblock": LstmLayout("lstmblock", "lstm_cell/", ("kernel", None, "bias"), "ijfo", 1.0, merged=True,
                            read_scopes=("lstm_block_cell/",)),
    "keras": LstmLayout("keras", "lstm_cell/", ("kernel", "recurrent_kernel", "bias"), "ifjo", 0.0, merged=False),
}


def get_lstm_layout(unit):
    """:param str unit: a rec unit name (nativelstm2, standardlstm, LSTMCell, lstmblock, keras, ...)"""
    name = unit.lower().replace("_", "")
    if name.endswith("cell") and name != "cell":
        name = name[:-len("cell")]
    if name in NATIVE_UNITS:
        name = "native"
    if name in ("lstmblockfused",):
        name = "lstmblock"
    if name == "keraslstm":
        name = "keras"
    if name not in LSTM_LAYOUTS:
        raise ValueError("unknown LSTM layout %r; known: %s (and the native aliases %s)" % (
            unit, ", ".join(sorted(LSTM_LAYOUTS)), ", ".join(NATIVE_UNITS)))
    return LSTM_LAYOUTS[name]


def _reorder(x, src, dst):
    """Gate blocks on the last axis from order src to order dst (strings of 'ijfo')."""
    n = x.shape[-1] // 4
    blocks = {g: x[..., k * n:(k + 1) * n] for k, g in enumerate(src)}
    return np.concatenate([blocks[g] for g in dst], axis=-1)


def _forget_slice(n, order):
    k = order.index("f")
    return slice(k * n, (k + 1) * n)


class CanonicalLstm:
    """Input kernel [n_in, 4n], recurrent kernel [n, 4n], bias [4n], gates (i, j, f, o), no run-time forget bias."""

    def __init__(self, w_in, w_rec, b):
        self.w_in, self.w_rec, self.b = w_in, w_rec, b

    @property
    def n(self):
        return self.w_rec.shape[0]


def lstm_to_canonical(layout, values, forget_bias=None):
    """
    :param LstmLayout layout:
    :param list[numpy.ndarray] values: the layout's params in the order of layout.names (without None entries)
    :param float|None forget_bias: the run-time forget bias of the source cell (default: the layout's)
    """
    fb = layout.default_forget_bias if forget_bias is None else forget_bias
    if layout.merged:
        kernel, b = values
        n = kernel.shape[1] // 4
        w_in, w_rec = kernel[:kernel.shape[0] - n], kernel[kernel.shape[0] - n:]
    else:
        w_in, w_rec, b = values
        n = w_rec.shape[0]
    _check_lstm_shapes(layout, w_in, w_rec, b)
    b = np.array(b, copy=True)
    if fb:
        b[_forget_slice(n, layout.order)] += np.asarray(fb, dtype=b.dtype)
    src = layout.order.replace("c", "j")
    return CanonicalLstm(_reorder(w_in, src, "ijfo"), _reorder(w_rec, src, "ijfo"), _reorder(b, src, "ijfo"))


def _check_lstm_shapes(layout, w_in, w_rec, b):
    n = w_rec.shape[0]
    if w_rec.ndim != 2 or w_rec.shape[1] != 4 * n or w_in.ndim != 2 or w_in.shape[1] != 4 * n or b.shape != (4 * n,):
        raise ValueError("LSTM params in %s layout have inconsistent shapes: input kernel %s, recurrent kernel %s, "
                         "bias %s" % (layout.name, w_in.shape, w_rec.shape, b.shape))


def canonical_to_lstm(layout, canon, forget_bias=None):
    """:return: list of values in the order of the layout's param names (without None entries)"""
    fb = layout.default_forget_bias if forget_bias is None else forget_bias
    dst = layout.order.replace("c", "j")
    w_in, w_rec, b = (_reorder(x, "ijfo", dst) for x in (canon.w_in, canon.w_rec, canon.b))
    if fb:
        b = np.array(b, copy=True)
        b[_forget_slice(canon.n, dst)] -= np.asarray(fb, dtype=b.dtype)
    if layout.merged:
        return [np.concatenate([w_in, w_rec], axis=0), b]
    return [w_in, w_rec, b]


def find_lstm_groups(shapes):
    """
    LSTM param groups in a name -> shape dict.
    :return: list of (prefix, layout, scope_used, [names]) sorted by prefix
    """
    found = []
    names = set(shapes)
    for name in sorted(names):
        if name.endswith("/W_re") or name == "W_re":
            prefix = name[:-len("W_re")]
            group = [prefix + "W", prefix + "W_re", prefix + "b"]
            if all(g in names for g in group) and _shapes_ok(shapes, group, merged=False):
                found.append((prefix, LSTM_LAYOUTS["native"], "", group))
            continue
        m = re.match(r"^(.*?)(lstm_cell|basic_lstm_cell|lstm_block_cell)/kernel$", name)
        if not m:
            continue
        prefix, scope = m.group(1), m.group(2) + "/"
        if prefix + scope + "recurrent_kernel" in names:
            group = [prefix + scope + "kernel", prefix + scope + "recurrent_kernel", prefix + scope + "bias"]
            if all(g in names for g in group) and _shapes_ok(shapes, group, merged=False):
                found.append((prefix, LSTM_LAYOUTS["keras"], scope, group))
            continue
        group = [prefix + scope + "kernel", prefix + scope + "bias"]
        if group[1] in names and _shapes_ok(shapes, group, merged=True):
            layout = {"lstm_cell/": "standardlstm", "basic_lstm_cell/": "basiclstm",
                      "lstm_block_cell/": "lstmblock"}[scope]
            found.append((prefix, LSTM_LAYOUTS[layout], scope, group))
    return found


def _shapes_ok(shapes, group, merged):
    s = [tuple(shapes[g]) for g in group]
    if merged:
        return len(s[0]) == 2 and len(s[1]) == 1 and s[0][1] == s[1][0] and s[0][1] % 4 == 0 and s[0][0] >= s[0][1] // 4
    return (len(s[0]) == 2 and len(s[1]) == 2 and len(s[2]) == 1 and s[1][1] == 4 * s[1][0] and s[0][1] == s[1][1]
            and s[2][0] == s[1][1])


def lstm_target_of(name):
    """
    If name is a param of an LSTM layout: (prefix, layout, index into the layout's values); else None.
    Merged-kernel names (``lstm_cell/kernel``) are reported as standardlstm, also for lstmblock (same layout).
    """
    for suffix, idx in (("W", 0), ("W_re", 1), ("b", 2)):
        if name.endswith("/rec/" + suffix) or name == "rec/" + suffix:
            return name[:-len(suffix)], LSTM_LAYOUTS["native"], idx
    m = re.match(r"^(.*?)(lstm_cell|basic_lstm_cell|lstm_block_cell)/(kernel|recurrent_kernel|bias)$", name)
    if m:
        scope, which = m.group(2), m.group(3)
        layout = LSTM_LAYOUTS["basiclstm" if scope == "basic_lstm_cell" else
                              "lstmblock" if scope == "lstm_block_cell" else "standardlstm"]
        if which == "recurrent_kernel":
            return m.group(1), LSTM_LAYOUTS["keras"], 1
        return m.group(1), layout, 0 if which == "kernel" else 1
    return None


# ---- batch norm ----

_BN_RE = re.compile(r"^(?P<base>(?:.*/)?batch_norm/)(?P<pfx>.*_)?(?P<kind>mean|variance|gamma|beta)$")


def batch_norm_param(name):
    """:return: (base e.g. 'bn/batch_norm/', version 0|1|2, kind) or None"""
    m = _BN_RE.match(name)
    if not m:
        return None
    pfx = m.group("pfx") or ""
    version = 2 if pfx == "v2_" else 0 if pfx else 1
    return m.group("base"), version, m.group("kind")


def batch_norm_v2_name(name):
    info = batch_norm_param(name)
    if info is None:
        return None
    return info[0] + "v2_" + info[2]


def batch_norm_candidates(base, kind, names):
    """Names of the same batch norm param in other param versions, among names (v2 first, then v1, then v0)."""
    out = [base + "v2_" + kind, base + kind]
    out += sorted(n for n in names if n.startswith(base) and n.endswith("_" + kind)
                  and batch_norm_param(n) is not None and batch_norm_param(n)[1] == 0)
    return [n for n in out if n in names]


def reshape_batch_norm(value, shape):
    """Broadcast-shaped (v0/v1) <-> flat (v2) statistics: only a reshape, same number of entries."""
    shape = tuple(shape)
    if int(np.prod(value.shape)) != int(np.prod(shape)):
        raise ValueError("batch norm param of shape %s cannot become shape %s" % (value.shape, shape))
    return np.reshape(value, shape)


# ---- whole-checkpoint conversions (dict name -> value), for the checkpoint tool ----

def convert_lstm_layouts(values, target, source_forget_bias=None, target_forget_bias=None, only_prefixes=None):
    """
    Convert every LSTM param group found in values to the target layout.
    :param dict[str,numpy.ndarray] values: modified in place
    :param str target: layout name or unit name
    :return: list of (prefix, source layout name) converted
    """
    target_layout = get_lstm_layout(target)
    done = []
    for prefix, layout, scope, group in find_lstm_groups({k: v.shape for k, v in values.items()}):
        if only_prefixes and not any(prefix.startswith(p) for p in only_prefixes):
            continue
        if layout is target_layout:
            continue
        canon = lstm_to_canonical(layout, [values[g] for g in group], source_forget_bias)
        new = canonical_to_lstm(target_layout, canon, target_forget_bias)
        for g in group:
            del values[g]
        for name, value in zip(target_layout.param_names(prefix), new):
            if name in values:
                raise ValueError("LSTM conversion of %r to %s: param %r exists already" % (prefix, target_layout.name,
                                                                                             name))
            values[name] = value
        done.append((prefix, layout.name))
    return done


def convert_batch_norm_to_v2(values):
    """v0/v1 batch norm params -> v2 names and [dim] shapes. :return: list of converted names"""
    done = []
    for name in sorted(values):
        info = batch_norm_param(name)
        if info is None or info[1] == 2:
            continue
        new = info[0] + "v2_" + info[2]
        if new in values:
            raise ValueError("batch norm conversion: %r and %r both exist" % (name, new))
        value = values.pop(name)
        values[new] = np.reshape(value, (-1,))
        done.append(name)
    return done
