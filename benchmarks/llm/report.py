"""Results of the LLM decode benchmark: the JSON file, one table per workload, a PNG plot; merging result files.

    python -m benchmarks.llm.report A.json B.json ... --out C.json [--no-plot]

A run of benchmarks/llm/run.py writes one JSON file: `runs` (argv, machine: GPU, driver, torch, Triton, Python
versions; schedule) and `cells`, one per (model, tiny, device, batch, position kind, op set, system); the op set
(`ops`: kernels or library, run.py) is part of the key, and cells of files written before it existed are
`kernels`. Merging several files (runs split across device calls) keeps every run and, per cell key, the later
file's cell, unless the earlier one finished and the later one did not. Writes C.json and C.png and prints the
tables: one per (model, batch, position kind, op set), the op sets of a workload next to each other.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

SYSTEMS = ("eager", "compile", "compile_cpp", "compile_ro", "compile_trident", "cuda_graph", "trident",
           "trident_graphs")  # table order
SCHEMA = "trident-llm-decode/3"  # 3: cells carry `ops`


def cell_key(cell: dict[str, Any]) -> tuple[Any, ...]:
    """(model, tiny, device, batch, position kind, op set, system)."""
    return (cell["model"], cell["tiny"], cell["device"], cell["batch"], cell["pos_kind"], cell.get("ops", "kernels"),
            cell["system"])


class Results:
    """The JSON: `runs` (machine facts per invocation) and `cells`; rewritten atomically after every cell."""

    def __init__(self, path: Path, runs: list[dict[str, Any]], cells: list[dict[str, Any]] | None = None) -> None:
        self.path, self.data = path, {"schema": SCHEMA, "runs": runs, "cells": []}
        for cell in cells or []:
            self.put(cell, write=False)

    @classmethod
    def merge(cls, paths: list[Path], out: Path) -> Results:
        """Cells of several result files: a later file's cell replaces an earlier one with the same key, unless
        the earlier one finished ('ok') and the later one did not (skipped, error, or killed while running)."""
        runs: list[dict[str, Any]] = []
        cells: dict[tuple[Any, ...], dict[str, Any]] = {}
        for path in paths:
            data = json.loads(path.read_text())
            for c in data["cells"]:
                old = cells.get(cell_key(c))
                if old is None or old["status"] != "ok" or c["status"] == "ok":
                    cells[cell_key(c)] = dict(c, run=c.get("run", 0) + len(runs))
            runs += data["runs"]
        return cls(out, runs, list(cells.values()))

    def put(self, cell: dict[str, Any], write: bool = True) -> None:
        key = cell_key(cell)
        self.data["cells"] = [c for c in self.data["cells"] if cell_key(c) != key] + [cell]
        if write:
            self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)


def group_cells(cells: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, dict[str, Any]]]:
    groups: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault(cell_key(c)[:-1], {})[c["system"]] = c
    return groups


def device_ms(cells: list[dict[str, Any]], model: str, tiny: bool, device: str, batch: int,
              ops: str = "kernels") -> float | None:
    """The CUDA-graph floor of (model, batch) under an op set, whatever the table's position kind."""
    for c in cells:
        key = cell_key(c)
        if key[:4] == (model, tiny, device, batch) and key[5] == ops and c["system"] == "cuda_graph" and c["status"] == "ok":
            return c.get("device_ms_per_token")
    return None


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def render_tables(cells: list[dict[str, Any]]) -> str:
    """One table per (model, device, batch, position kind, op set): ms/token and the ratios."""
    lines: list[str] = []
    for (model, tiny, device, batch, pos_kind, ops), systems in sorted(group_cells(cells).items(), key=str):
        floor = device_ms(cells, model, tiny, device, batch, ops)
        eager, compiled = (systems.get(s, {}).get("ms_per_token") for s in ("eager", "compile"))
        lines += ["", f"{model}{' (tiny)' if tiny else ''}, {device}, batch {batch}, position as {pos_kind}, ops "
                      f"{ops}; device time (CUDA-graph replay) {fmt(floor, '.3f')} ms/token",
                  f"{'system':<14} {'ms/token':>9} {'vs eager':>9} {'vs compile':>10} {'/ device':>9} "
                  f"{'1st call s':>10} {'warm-up s':>9} {'check':>6}  notes"]
        for name in SYSTEMS:
            c = systems.get(name)
            if c is None:
                continue
            ms, check = c.get("ms_per_token"), c.get("check") or c.get("reference_check")
            why = (c.get("error") or c.get("reason") or "").strip().splitlines()
            notes = c.get("notes", "") if c["status"] == "ok" else f"{c['status']}: {why[0][:100] if why else ''}"
            lines.append(f"{name:<14} {fmt(ms, '.3f'):>9} {fmt(ratio(eager, ms), '.2f', 'x'):>9} "
                         f"{fmt(ratio(compiled, ms), '.2f', 'x'):>10} {fmt(ratio(ms, floor), '.2f', 'x'):>9} "
                         f"{fmt(c.get('first_call_s'), '.2f'):>10} {fmt(c.get('warmup_s'), '.2f'):>9} "
                         f"{'-' if not check else 'ok' if check['ok'] else 'FAIL':>6}  {notes}")
    return "\n".join(lines)


def render_markdown(cells: list[dict[str, Any]]) -> str:
    """One summary row per (model, batch, position kind, op set), for the README: ms/token of each system
    (checks that failed marked), device time, and Trident's ratios."""
    head = ("| model | batch | position | ops | eager | compile | compile ro | CUDA graph (device) | trident "
            "| trident graphs | trident / device | graphs / device | trident vs eager | trident vs compile "
            "| first call s: compile / trident |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (model, tiny, device, batch, pos_kind, ops), systems in sorted(group_cells(cells).items(), key=str):
        if "trident" not in systems and "eager" not in systems:
            continue  # the CUDA graph's own group (position as tensor) when only int positions ran
        floor = device_ms(cells, model, tiny, device, batch, ops)

        def ms(name: str) -> float | None:
            c = systems.get(name, {})
            return c.get("ms_per_token") if c.get("status") == "ok" else None

        def first_s(name: str) -> float | None:
            return systems.get(name, {}).get("first_call_s") if ms(name) is not None else None

        def cell(name: str) -> str:
            check = systems.get(name, {}).get("check") or {}
            return fmt(ms(name), ".3f") + (" (check FAILED)" if check and not check["ok"] else "")

        lines.append(f"| {model}{' (tiny)' if tiny else ''} | {batch} | {pos_kind} | {ops} | {cell('eager')} | "
                     f"{cell('compile')} | {cell('compile_ro')} | {fmt(floor, '.3f')} | {cell('trident')} | "
                     f"{cell('trident_graphs')} | {fmt(ratio(ms('trident'), floor), '.2f', 'x')} | "
                     f"{fmt(ratio(ms('trident_graphs'), floor), '.2f', 'x')} | "
                     f"{fmt(ratio(ms('eager'), ms('trident')), '.2f', 'x')} | "
                     f"{fmt(ratio(ms('compile'), ms('trident')), '.2f', 'x')} | "
                     f"{fmt(first_s('compile'), '.1f')} / {fmt(first_s('trident'), '.1f')} |")
    return "\n".join(lines)


def plot(cells: list[dict[str, Any]], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "note: matplotlib is not importable; no plot written"
    groups = group_cells(cells)
    if not groups:
        return "note: no cells to plot"
    # group keys: (model, tiny, device, batch, position kind, op set)
    rows = sorted({key[:3] + key[5:] for key in groups}, key=str)  # one row per (model, op set)
    cols = sorted({key[3:5] for key in groups}, key=str)  # one column per (batch, position kind)
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(3.2 * len(cols) + 1, 3.4 * len(rows)), squeeze=False)
    for (r, row), (c, col) in itertools.product(enumerate(rows), enumerate(cols)):
        ax, systems = axes[r][c], groups.get(row[:3] + col + row[3:], {})
        names = [s for s in SYSTEMS if systems.get(s, {}).get("ms_per_token")]
        bars = ax.bar(names, [systems[s]["ms_per_token"] for s in names], color="#4c72b0")
        ax.bar_label(bars, fmt="%.2f", fontsize=6)
        floor = device_ms(cells, *row[:3], col[0], row[3])
        if floor:
            ax.axhline(floor, color="#c44e52", linestyle="--", label="device time")
            ax.legend(fontsize=7)
        ax.set_title(f"{row[0]} ({row[3]}) batch {col[0]}, position as {col[1]}", fontsize=9)
        ax.set_ylabel("ms / token")
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


def finish(results: Results, no_plot: bool = False) -> None:
    """Print the tables (and the README summary) and write the plot next to the JSON."""
    print(render_tables(results.data["cells"]))
    print("\nsummary, ms/token (markdown):\n" + render_markdown(results.data["cells"]))
    if not no_plot:
        print(plot(results.data["cells"], results.path.with_suffix(".png")))
    print(f"\nraw results: {results.path}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", type=Path, nargs="+", help="result files of benchmarks/llm/run.py, earliest first")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)
    results = Results.merge(args.files, args.out)
    results.write()
    finish(results, args.no_plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
