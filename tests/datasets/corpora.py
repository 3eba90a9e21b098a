"""Small synthetic corpora for the dataset tests and the dataset benchmark (audio zips, text files)."""

from __future__ import annotations

import io
import os
import zipfile

import numpy

SENTENCES = ["the cat sat on the mat", "a dog ran to the park", "she sells sea shells", "hello world",
             "the quick brown fox jumps", "red cats and blue dogs", "it is a sunny day", "we hear the rain fall"]


def synth_audio(seed, seconds, sample_rate=16000):
    """A few sines plus noise, float in [-0.5, 0.5]."""
    rnd = numpy.random.RandomState(seed)
    t = numpy.arange(int(seconds * sample_rate)) / sample_rate
    audio = sum(rnd.uniform(0.05, 0.2) * numpy.sin(2 * numpy.pi * rnd.uniform(100, 3000) * t) for _ in range(3))
    return (audio + 0.02 * rnd.randn(len(t))).astype("float32")


def encode_audio(audio, sample_rate=16000, fmt="OGG"):
    import soundfile
    buf = io.BytesIO()
    soundfile.write(buf, audio, sample_rate, format=fmt, subtype="VORBIS" if fmt == "OGG" else "PCM_16")
    return buf.getvalue()


def write_ogg_zip(directory, name, num_seqs, seconds=(0.2, 0.5), fmt="OGG", text_only=False, seed=0,
                  sentences=SENTENCES):
    """``directory/name.zip`` in OggZip layout; returns (zip path, meta entries)."""
    rnd = numpy.random.RandomState(seed)
    ext = "ogg" if fmt == "OGG" else "wav"
    entries = []
    path = os.path.join(directory, name + ".zip")
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(num_seqs):
            duration = float(round(rnd.uniform(*seconds), 3))
            entry = {"text": sentences[i % len(sentences)], "duration": duration}
            if text_only:
                entry["seq_name"] = "%s/seq-%i" % (name, i)
            else:
                entry["file"] = "utt%03i.%s" % (i, ext)
                zf.writestr("%s/%s" % (name, entry["file"]), encode_audio(synth_audio(seed * 1000 + i, duration),
                                                                         fmt=fmt))
            entries.append(entry)
        zf.writestr(name + ".txt", repr(entries))
    return path, entries


def write_chars_vocab(path, chars="@ abcdefghijklmnopqrstuvwxyz"):
    with open(path, "w", encoding="utf8") as f:
        f.write("".join(c + "\n" for c in chars))
    return path


def write_bpe(directory):
    """A tiny subword-nmt codes file (version 0.2) and its vocab dict."""
    codes = ["#version: 0.2", "t h", "th e</w>", "a t</w>", "c at</w>", "s at</w>", "o n</w>", "d o", "do g</w>"]
    codes_path = os.path.join(directory, "bpe.codes")
    with open(codes_path, "w", encoding="utf8") as f:
        f.write("\n".join(codes) + "\n")
    units = ["<s>", "<unk>", "the", "cat", "sat", "on", "dog", "at", "m@@", "a", "th@@"]
    units += [c + "@@" for c in "abcdefghijklmnopqrstuvwxyz" if c + "@@" not in units]
    units += [c for c in "bcdefghijklmnopqrstuvwxyz"]
    vocab = {"<s>": 0, "</s>": 0}
    vocab.update({u: i for i, u in enumerate(units) if u != "<s>"})
    vocab_path = os.path.join(directory, "bpe.vocab")
    with open(vocab_path, "w", encoding="utf8") as f:
        f.write(repr(vocab))
    return codes_path, vocab_path
