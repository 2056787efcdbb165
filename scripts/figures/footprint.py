"""Footprint of libgossamer_c and of an agent per build profile
(docs/embedding.md): scripts/footprint.sh builds the full and minimal
profiles and runs bindings/c/examples/footprint.c, 2 ranks on loopback
(scripts/footprint.py): stripped library size, resident memory of rank 0
with an idle agent and after training 100,000 parameters, threads, sockets;
the aarch64 profiles under qemu-aarch64, their memory the Rss of the
program's own mappings (the emulator's left out).
"""
COMMAND = ["scripts/footprint.sh"]
JSON = "results/footprint.json"


def render(data):
    """One row per profile, architecture and transport: the library's size in
    MB (10^6 bytes), resident memory in MiB (2^20 bytes, as /proc counts)."""
    lines = ["| profile | arch | transport | libgossamer_c stripped, MB | idle agent: resident, MiB "
             "| of which the agent, MiB | training 100k parameters: resident, MiB | of which agent and training, MiB "
             "| threads | sockets | memory measured as |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        how = "Rss of its own mappings, under qemu" if r["emulated"] else "VmRSS"
        lines.append(f"| {r['profile']} | {r['arch']} | {r['transport']} | {r['library_bytes'] / 1e6:.2f} | "
                     f"{r['idle_kib'] / 1024:.1f} | {r['idle_added_kib'] / 1024:.1f} | "
                     f"{r['training_kib'] / 1024:.1f} | {r['training_added_kib'] / 1024:.1f} | "
                     f"{r['idle']['threads']} | {r['idle']['sockets']} | {how} |")
    return "\n".join(lines) + "\n"
