#!/usr/bin/env python3
"""
Loading speed of an OggZip corpus: the benchmark writes N synthetic utterances (Ogg Vorbis, 16 kHz, 0.5-2 s,
with transcriptions) into an OggZip, then reads all of them with log-mel features (40 filters, 25 ms / 10 ms)
and character targets

* through returnn_lite's ``OggZipDataset`` (``init_seq_order``, ``load_seqs``, ``get_data`` of all keys), and
* with the same extraction written directly: ``zipfile`` + ``soundfile.read`` + ``librosa.feature.melspectrogram``
  + ``numpy.log`` + the transcription's char ids,

in the same process, alternating, CPU time, min over rounds. Prints utterances/second of both and the ratio
returnn_lite / direct (goal >= 0.9). Needs the ``audio`` extra (soundfile, librosa).

    python benchmarks/datasets.py [--utterances 2000] [--rounds 3] [--dir /tmp/x]
"""

import argparse
import ast
import io
import os
import sys
import tempfile
import time
import zipfile

import numpy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from returnn_lite.datasets import init_dataset  # noqa: E402

WORDS = "the cat sat on a mat dog ran to park she sells sea shells hello world quick brown fox jumps".split()
CHARS = "@ abcdefghijklmnopqrstuvwxyz"
SAMPLE_RATE = 16000


def write_corpus(directory, num_utts, seed=0):
    import soundfile
    rnd = numpy.random.RandomState(seed)
    name = "bench"
    path = os.path.join(directory, name + ".zip")
    entries = []
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(num_utts):
            duration = float(round(rnd.uniform(0.5, 2.0), 3))
            t = numpy.arange(int(duration * SAMPLE_RATE)) / SAMPLE_RATE
            audio = sum(0.1 * numpy.sin(2 * numpy.pi * rnd.uniform(100, 3000) * t) for _ in range(3))
            audio = (audio + 0.02 * rnd.randn(len(t))).astype("float32")
            buf = io.BytesIO()
            soundfile.write(buf, audio, SAMPLE_RATE, format="OGG", subtype="VORBIS")
            entry = {"text": " ".join(rnd.choice(WORDS, size=rnd.randint(3, 10))), "duration": duration,
                     "file": "utt%05i.ogg" % i}
            zf.writestr("%s/%s" % (name, entry["file"]), buf.getvalue())
            entries.append(entry)
        zf.writestr(name + ".txt", repr(entries))
    chars_path = os.path.join(directory, "chars.txt")
    with open(chars_path, "w") as f:
        f.write("".join(c + "\n" for c in CHARS))
    return path, chars_path


def read_returnn_lite(zip_path, chars_path):
    ds = init_dataset({"class": "OggZipDataset", "path": zip_path,
                       "audio": {"features": "log_mel_filterbank", "num_feature_filters": 40},
                       "targets": {"class": "CharacterTargets", "vocab_file": chars_path}})
    ds.init_seq_order(epoch=1)
    frames = 0
    for i in range(ds.num_seqs):
        ds.load_seqs(i, i + 1)
        frames += ds.get_data(i, "data").shape[0]
        ds.get_data(i, "classes")
        ds.get_data(i, "orth")
        ds.get_data(i, "raw")
    return ds.num_seqs, frames


def read_direct(zip_path, chars_path):
    import librosa
    import soundfile
    zf = zipfile.ZipFile(zip_path)
    entries = ast.literal_eval(zf.read("bench.txt").decode("utf8"))
    char_ids = {c: i for i, c in enumerate(CHARS)}
    frames = 0
    for entry in entries:
        audio, sr = soundfile.read(io.BytesIO(zf.read("bench/" + entry["file"])))
        audio = audio / numpy.max(numpy.abs(audio))
        mel = librosa.feature.melspectrogram(y=audio, sr=sr, n_mels=40, hop_length=int(0.01 * sr),
                                             n_fft=int(0.025 * sr))
        feats = numpy.log(numpy.maximum(1e-3, mel)).T.astype("float32")
        numpy.array([char_ids.get(c, 0) for c in entry["text"]], dtype="int32")
        numpy.frombuffer(entry["text"].encode("utf8"), dtype="uint8")
        frames += feats.shape[0]
    return len(entries), frames


def cpu_time(func, *args):
    start = time.process_time()
    result = func(*args)
    return time.process_time() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utterances", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", help="where to write the corpus (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or tmp
        os.makedirs(directory, exist_ok=True)
        start = time.time()
        zip_path, chars_path = write_corpus(directory, args.utterances)
        print("wrote %i utterances in %.1fs: %s" % (args.utterances, time.time() - start, zip_path))
        read_direct(zip_path, chars_path)  # warm up (librosa/numba compile, file cache)
        best_lite = best_direct = float("inf")
        for r in range(args.rounds):
            t_direct, (n, frames_direct) = cpu_time(read_direct, zip_path, chars_path)
            t_lite, (n_lite, frames_lite) = cpu_time(read_returnn_lite, zip_path, chars_path)
            assert (n, frames_direct) == (n_lite, frames_lite), ((n, frames_direct), (n_lite, frames_lite))
            best_lite, best_direct = min(best_lite, t_lite), min(best_direct, t_direct)
            print("round %i: returnn_lite %.2fs, direct %.2fs (CPU)" % (r + 1, t_lite, t_direct))
        lite_ups, direct_ups = args.utterances / best_lite, args.utterances / best_direct
        print("returnn_lite OggZipDataset: %.1f utterances/s" % lite_ups)
        print("direct numpy/soundfile/librosa: %.1f utterances/s" % direct_ups)
        print("ratio returnn_lite / direct: %.3f (goal >= 0.9)" % (lite_ups / direct_ups))


if __name__ == "__main__":
    main()
