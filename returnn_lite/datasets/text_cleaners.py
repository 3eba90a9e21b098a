"""
The original's named text post processors (``orth_post_process`` / ``targets_post_process`` given as a name, a
call string such as ``"get_remove_chars(',/')"``, or a list of those, applied in order): ``lowercase``,
``lowercase_keep_special``, ``collapse_whitespace``, ``expand_abbreviations``, ``basic_cleaners``,
``convert_to_ascii``, ``transliteration_cleaners``, ``english_cleaners``, ``english_cleaners_keep_special``,
``normalize_numbers``, ``get_remove_chars(chars)``, ``get_replace(old, new)``.
The Tacotron-style cleaners (keithito/tacotron conventions). ``convert_to_ascii`` needs the ``unidecode`` package,
number expansion the ``inflect`` package; without them those fail when used, naming the package.
"""

from __future__ import annotations

import re

from .basic import DatasetError

__all__ = ["get_post_processor_function", "post_processor_names"]

_SPACES = re.compile(r"\s+")

# (abbreviation, expansion): "mr." -> "mister" etc., case-insensitive, at a word start
_ABBREVIATIONS = [(re.compile(r"\b%s\." % short, re.IGNORECASE), long) for short, long in (
    ("mrs", "misses"), ("ms", "miss"), ("mr", "mister"), ("dr", "doctor"), ("st", "saint"), ("co", "company"),
    ("jr", "junior"), ("maj", "major"), ("gen", "general"), ("drs", "doctors"), ("rev", "reverend"),
    ("lt", "lieutenant"), ("hon", "honorable"), ("sgt", "sergeant"), ("capt", "captain"), ("esq", "esquire"),
    ("ltd", "limited"), ("col", "colonel"), ("ft", "fort"))]


def _need(module):
    try:
        return __import__(module)
    except ImportError:
        raise DatasetError("text post processing needs the package %r (pip install %s)" % (module, module)) from None


def lowercase(text):
    return text.lower()


def lowercase_keep_special(text):
    """Lowercase every whitespace-separated token except ``[...]`` and ``<...>`` specials."""
    return re.sub(r"(\s|^)(?!(\[\S*])|(<\S*>))\S+(?=\s|$)", lambda m: m.group(0).lower(), text)


def collapse_whitespace(text):
    return _SPACES.sub(" ", text).strip()


def expand_abbreviations(text):
    for pattern, expansion in _ABBREVIATIONS:
        text = pattern.sub(expansion, text)
    return text


def convert_to_ascii(text):
    return _need("unidecode").unidecode(text)


def basic_cleaners(text):
    return collapse_whitespace(lowercase(text))


def transliteration_cleaners(text):
    return collapse_whitespace(lowercase(convert_to_ascii(text)))


def english_cleaners(text):
    text = lowercase(convert_to_ascii(text))
    return collapse_whitespace(expand_abbreviations(normalize_numbers(text, with_spacing=True)))


def english_cleaners_keep_special(text):
    text = lowercase_keep_special(convert_to_ascii(text))
    return collapse_whitespace(expand_abbreviations(normalize_numbers(text, with_spacing=True)))


def get_remove_chars(chars):
    """Each of chars becomes a space, then whitespace is collapsed."""
    def remove_chars(text):
        for c in chars:
            text = text.replace(c, " ")
        return collapse_whitespace(text)
    return remove_chars


def get_replace(old, new):
    return lambda text: text.replace(old, new)


# ---- numbers (need inflect)

_engine = None


def _inflect():
    global _engine
    if _engine is None:
        _engine = _need("inflect").engine()
    return _engine


_DIGIT_WORDS = dict(zip("0123456789", "zero one two three four five six seven eight nine".split()))


def _dollars(match):
    amount = match.group(1)
    parts = amount.split(".")
    if len(parts) > 2:
        return amount + " dollars"
    dollars = int(parts[0]) if parts[0] else 0
    cents = int(parts[1]) if len(parts) > 1 and parts[1] else 0

    def unit(n, one, many):
        return "%s %s" % (n, one if n == 1 else many)

    if dollars and cents:
        return "%s, %s" % (unit(dollars, "dollar", "dollars"), unit(cents, "cent", "cents"))
    if dollars:
        return unit(dollars, "dollar", "dollars")
    if cents:
        return unit(cents, "cent", "cents")
    return "zero dollars"


def _number_words(match):
    s = match.group(0).strip()
    if "." in s:
        return _inflect().number_to_words(s, andword="")
    n = int(s)
    if s.startswith("0") or n == 747:  # read digit by digit
        return " ".join(_DIGIT_WORDS.get(c, c) for c in s)
    if 1000 < n < 3000:  # years
        if n == 2000:
            return "two thousand"
        if 2000 < n < 2010:
            return "two thousand " + _inflect().number_to_words(n % 100)
        if n % 100 == 0:
            return _inflect().number_to_words(n // 100) + " hundred"
        return _inflect().number_to_words(n, andword="", zero="oh", group=2).replace(", ", " ")
    return _inflect().number_to_words(n, andword="")


def normalize_numbers(text, with_spacing=False):
    """Numbers, amounts and ordinals spelled out (with_spacing: numbers get a space on both sides)."""
    text = re.sub(r"([0-9][0-9,]+[0-9])", lambda m: m.group(1).replace(",", ""), text)
    text = re.sub(r"£([0-9,]*[0-9]+)", r"\1 pounds", text)
    text = re.sub(r"\$([0-9.,]*[0-9]+)", _dollars, text)
    text = re.sub(r"([0-9]+\.[0-9]+)", lambda m: m.group(1).replace(".", " point "), text)
    text = re.sub(r"[0-9]+(st|nd|rd|th)", lambda m: _inflect().number_to_words(m.group(0)), text)
    return re.sub(r"[0-9]+", (lambda m: " %s " % _number_words(m)) if with_spacing else _number_words, text)


_NAMED = {f.__name__: f for f in (
    lowercase, lowercase_keep_special, collapse_whitespace, expand_abbreviations, convert_to_ascii, basic_cleaners,
    transliteration_cleaners, english_cleaners, english_cleaners_keep_special, normalize_numbers)}
_FACTORIES = {"get_remove_chars": get_remove_chars, "get_replace": get_replace}


def post_processor_names():
    return sorted(_NAMED) + sorted(_FACTORIES)


def get_post_processor_function(opts, what="post_process"):
    """
    opts: a function str -> str, a name (``"english_cleaners"``), a call string of a factory
    (``"get_remove_chars(',/')"``) or a list of those (applied in order) -> function str -> str.
    """
    if not opts:
        return None
    if callable(opts):
        return opts
    if isinstance(opts, (list, tuple)):
        funcs = [get_post_processor_function(o, what) for o in opts]
        funcs = [f for f in funcs if f is not None]

        def chained(text):
            for f in funcs:
                text = f(text)
            return text
        return chained
    if not isinstance(opts, str):
        raise DatasetError("%s: expected a function, a name or a list, got %r" % (what, opts))
    if "(" in opts or "," in opts:  # a factory call, as the original evaluates it in its module
        try:
            func = eval(opts, {"__builtins__": {}}, dict(_FACTORIES, **_NAMED))  # noqa: S307 (config code)
        except Exception as exc:
            raise DatasetError("%s: cannot evaluate %r: %s (known: %s)" % (
                what, opts, exc, ", ".join(post_processor_names()))) from None
        return get_post_processor_function(func, what)
    if opts not in _NAMED:
        raise DatasetError("%s: unknown post processor %r (known: %s)" % (what, opts, ", ".join(post_processor_names())))
    return _NAMED[opts]
