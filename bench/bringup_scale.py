"""Bring-up time against task count: tfrun's local backend against a hand launch.

For each N, ``tfrun -w N -s 0 -Cw 0.01 -Mw 1 -- python -c pass`` and
``sh -c 'python -c pass & ... (N times) wait'``, wall time start to exit,
alternating. Writes the usual JSON and table, and ``bringup_scale.png`` (a plot
of both against N) when matplotlib is importable; without it the data is still
written and the script says so.
"""

from __future__ import annotations

from pathlib import Path

from benchlib import (
    PYTHON,
    Result,
    alternate,
    command_line,
    parse_args,
    scratch,
    tfrun,
    timed,
)


def plot(result: Result, sizes: list[int], path: Path) -> str | None:
    """Draw the figure; return why not, if it cannot be drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib is not importable ({exc}); the data is in the JSON and table only"
    fig, (ax, ax_ratio) = plt.subplots(
        2, 1, figsize=(7, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]}
    )
    for name, style in (("tfrun", "o-"), ("hand", "s--")):
        rows = [result.row(f"wall time, {name}, {n} tasks") for n in sizes]
        medians = [r.median for r in rows]
        errors = [[r.median - r.min for r in rows], [r.max - r.median for r in rows]]
        label = "tfrun (local backend)" if name == "tfrun" else "by hand (sh, & and wait)"
        ax.errorbar(sizes, medians, yerr=errors, fmt=style, capsize=3, label=label)
    ax.set_ylabel("wall time, start to exit (s)")
    ax.set_title("Bring-up of N tasks running `python -c pass` (median, min\u2013max)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    ratios = [
        result.row(f"wall time, tfrun, {n} tasks").median
        / result.row(f"wall time, hand, {n} tasks").median
        for n in sizes
    ]
    ax_ratio.plot(sizes, ratios, "o-", color="tab:red")
    ax_ratio.set_ylabel("tfrun / hand")
    ax_ratio.set_xlabel("tasks (N)")
    ax_ratio.grid(True, alpha=0.3)
    ax_ratio.set_ylim(bottom=0)
    m = result.machine
    fig.text(
        0.01,
        0.005,
        f"nproc {m['nproc']}, {m['cpu_model']}, Python {m['python']}",
        fontsize=7,
        color="gray",
    )
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=3)
    sizes = [1, 2] if args.smoke else [1, 10] if args.quick else [1, 10, 50, 100, 200]
    result = Result(
        "bringup_scale",
        command_line("bringup_scale.py", args),
        args.quick,
        {"reps": args.reps, "tasks": sizes, "task": "python -c pass"},
    )
    with scratch("scale") as logs:

        def tfrun_job(n: int) -> float:
            return timed(
                [
                    *tfrun(),
                    *("-w", str(n), "-s", "0", "-Cw", "0.01", "-Mw", "1"),
                    *("--log-dir", str(logs), "--", PYTHON, "-c", "pass"),
                ]
            )

        def hand_job(n: int) -> float:
            return timed(["sh", "-c", " ".join([f"'{PYTHON}' -c pass &"] * n) + " wait"])

        contenders = {}
        for n in sizes:
            contenders[f"tfrun {n}"] = lambda n=n: tfrun_job(n)
            contenders[f"hand {n}"] = lambda n=n: hand_job(n)
        walls = alternate(args.reps, contenders, warmup=args.warmup)
    for n in sizes:
        result.add(f"wall time, tfrun, {n} tasks", "s", walls[f"tfrun {n}"])
        result.add(f"wall time, hand, {n} tasks", "s", walls[f"hand {n}"])
    for n in sizes:
        result.ratio(
            f"tfrun / hand, {n} tasks",
            f"wall time, tfrun, {n} tasks",
            f"wall time, hand, {n} tasks",
        )
    # Per task beyond the first: the slope of each line.
    for name in ("tfrun", "hand"):
        first = result.row(f"wall time, {name}, {sizes[0]} tasks").median
        last = result.row(f"wall time, {name}, {sizes[-1]} tasks").median
        result.extra[f"{name}: seconds per extra task"] = (last - first) / (sizes[-1] - sizes[0])
        result.note(
            f"{name}: {(last - first) / (sizes[-1] - sizes[0]) * 1000:.1f} ms per extra task "
            f"({sizes[0]} to {sizes[-1]} tasks)"
        )
    png = args.results_dir / "bringup_scale.png"
    why_not = plot(result, sizes, png)
    if why_not is None:
        result.extra["plot"] = png.name
        print(f"[bringup_scale] wrote {png}", flush=True)
    else:
        result.extra["plot"] = None
        result.note(why_not)
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
