"""The SpamAssassin data set as scripts/spam-data.sh makes it (docs/sparse-data.md).

Counts of the hashed bag-of-words LIBSVM files with the default options (2^18
features, 20% test): messages, spam and non-zeros, overall and per split, and
how many distinct tokens hash to how many features (scripts/spam_features.py,
spam-stats.json).
"""
COMMAND = ["scripts/spam-data.sh"]
JSON = "data/spam/spam-stats.json"


def render(data):
    """The table: messages, spam (and its share) and non-zeros of all messages,
    the training and the test split; then the tokens and features used."""
    lines = ["| | messages | spam | nnz |", "| --- | --- | --- | --- |"]
    m, s, z = data["messages"], data["spam"], data["nnz"]
    lines.append(f"| all | {m} | {s} ({100 * s / m:.2f}%) | {z:,} ({z / m:.1f} per message) |")
    for part in ("train", "test"):
        p = data[part]
        lines.append(f"| {part} | {p['messages']} | {p['spam']} ({100 * p['spam'] / p['messages']:.2f}%) "
                     f"| {p['nnz']:,} |")
    return ("\n".join(lines) + "\n\n"
            f"{data['distinct_tokens']:,} distinct tokens hash to {data['features_used']:,} "
            f"of the {data['features']:,} features.\n")
