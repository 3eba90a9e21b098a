"""
No circular imports: every module of the package imports alone (fresh package state, in a subprocess); the
module-level import graph of the package has no cycles; and neither has the graph with the function-level (lazy)
imports, where importing ``a.b.c`` also runs the ``__init__`` of the packages ``a.b`` on the way (the registries' lazy
``_load_all`` loaders and plugins loaded by module name, e.g. rf backends, are not imports of their users).
"""

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "returnn_lite"

# no cycle, not even through lazy (function-level) imports, may pass through these
LEAF_MODULES = {"returnn_lite.errors", "returnn_lite.registry", "returnn_lite.layer_ref", "returnn_lite.util",
                "returnn_lite.losses.holder", "returnn_lite.losses.base", "returnn_lite.layers.norm",
                "returnn_lite.initializers", "returnn_lite.activations"}
# pairs that must not import each other in both directions (the historical cycles of issue 10)
NO_MUTUAL = [("returnn_lite.losses.holder", "returnn_lite.network"), ("returnn_lite.layers.base",
                                                                       "returnn_lite.layers.norm")]


def _modules():
    mods = {}
    for dirpath, _, filenames in os.walk(os.path.join(ROOT, PKG)):
        for f in filenames:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[:-len(".__init__")]
                mods[name] = path
    return mods


def _top_level_nodes(tree):
    for node in tree.body:
        yield from (ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node])


def _import_graph(mods, module_level_only=False):
    edges = {}
    for mod, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        deps = set()
        tree = ast.parse(open(path).read())
        for node in (_top_level_nodes(tree) if module_level_only else ast.walk(tree)):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                found = [target + "." + a.name for a in node.names if target + "." + a.name in mods]
                deps.update(found or [target])
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        edges[mod] = {d for d in deps if d in mods and d != mod and not d.endswith("._load_all")}
    return edges


# lazy import cycles that are allowed, each with its reason: {frozenset(modules): reason} (none today)
ALLOWED_LAZY_CYCLES = {}


def _with_package_inits(edges):
    """Importing a.b.c also runs the __init__ of a.b (unless the importer is inside a.b itself: already running)."""

    def ancestors(mod):
        parts = mod.split(".")
        return {".".join(parts[:i]) for i in range(2, len(parts))}

    res = {}
    for mod, deps in edges.items():
        own = ancestors(mod) | {mod}
        res[mod] = set(deps) | {a for d in deps for a in ancestors(d) if a in edges and a not in own}
    return res


def _cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, res = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                res.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return res


def test_no_module_level_import_cycles():
    cycles = _cycles(_import_graph(_modules(), module_level_only=True))
    assert not cycles, "module-level import cycles: %s" % [sorted(c) for c in cycles]


def test_no_lazy_import_cycles_through_base_modules():
    edges = _import_graph(_modules())
    cycles = _cycles(edges)
    bad = [sorted(c & LEAF_MODULES) for c in cycles if c & LEAF_MODULES]
    assert not bad, "import cycles through %s" % bad
    for a, b in NO_MUTUAL:
        assert not (b in edges[a] and a in edges[b]), (a, b)


def test_no_lazy_import_cycles():
    cycles = _cycles(_with_package_inits(_import_graph(_modules())))
    bad = [sorted(c) for c in cycles if frozenset(c) not in ALLOWED_LAZY_CYCLES]
    assert not bad, "import cycles (lazy imports and package __init__s included): %s" % bad


def test_package_init_edges_are_seen():
    """The graph sees that a lazy import of a sub-module runs its package's __init__ (the cycles fixed in issue 10
    went through layers.rec's and tensor's __init__)."""
    edges = _with_package_inits({"p.a": {"p.q.b"}, "p.q.b": set(), "p.q": {"p.q.b"}, "p.q.c": {"p.q.b"}})
    assert edges["p.a"] == {"p.q.b", "p.q"} and edges["p.q.c"] == {"p.q.b"}


def test_each_module_imports_alone():
    mods = sorted(m for m in _modules() if not m.endswith("__main__"))
    script = """
import importlib, sys, traceback
import tensorflow  # noqa: F401 (imported once; every module below starts from a fresh package state)
failed = []
for name in %r:
    for key in [k for k in sys.modules if k == %r or k.startswith(%r)]:
        del sys.modules[key]
    try:
        importlib.import_module(name)
    except Exception:
        failed.append((name, traceback.format_exc(limit=3)))
for name, tb in failed:
    print("FAILED", name, tb)
sys.exit(1 if failed else 0)
""" % (mods, PKG, PKG + ".")
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
