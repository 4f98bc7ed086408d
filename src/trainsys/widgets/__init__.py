"""Interactive figures for the lessons' checkpoints: move a slider, watch the memory bill change.

Every explorer computes with the package's own estimates (never a second copy of a formula) and is
built the same way (:func:`explorer`): controls above an ``Output`` that holds a matplotlib figure.
The figure for the initial values is drawn when the explorer is built, so a notebook executed with no
front end (nbval, nbgrader, the book build) still shows a static figure; in JupyterLab every change
redraws it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from trainsys.memtrain.accumulation import accumulation_memory_timeline, estimate_accumulation_peak_bytes
from trainsys.memtrain.checkpointing import checkpointing_memory_timeline, estimate_checkpointing_memory_savings
from trainsys.memtrain.mixed_precision import training_memory_by_precision

MiB = 2**20

__all__ = ["explorer", "accumulation_explorer", "checkpointing_explorer", "precision_explorer", "diloco_explorer",
           "fedavg_explorer", "memory_explorer", "transformer_memory_explorer", "formats_explorer"]


FRAMES_ENV = "TRAINSYS_WIDGET_FRAMES"
"""Set to ``all`` (the book's build does, ``book/_ext/widget_frames.py``) to draw every frame of every
explorer when it is built, so that the static page answers every control without a kernel."""


def _positions(name: str, control: widgets.ValueWidget) -> tuple[list, str]:
    """The values ``control`` can take, in order, and the trait that holds the position among them."""
    if isinstance(control, widgets.widget_selection._Selection):
        return [value for _, value in control._options_full], "index"
    if isinstance(control, widgets.IntSlider):
        if control.min != 0 or control.step != 1:
            raise ValueError(f"explorer control {name!r}: an IntSlider must run from 0 in steps of 1 (its value is the "
                             f"frame index), got min={control.min}, step={control.step}")
        return list(range(control.min, control.max + 1)), "value"
    raise TypeError(f"explorer control {name!r}: expected a selection widget (SelectionSlider, Dropdown, ToggleButtons) "
                    f"or an IntSlider from 0, got {type(control).__name__}")


def _live(controls: Mapping[str, widgets.ValueWidget], draw: Callable[..., Figure]) -> widgets.Output:
    """An ``Output`` redrawn by the kernel whenever a control changes (for explorers with a JavaScript twin,
    whose control combinations are too many to keep as frames)."""
    output = widgets.Output()

    def redraw(_change: object = None) -> None:
        fig = draw(**{name: control.value for name, control in controls.items()})
        output.clear_output(wait=True)
        with output:
            display(fig)
        plt.close(fig)

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    return output


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def frame_class(positions: Sequence[int]) -> str:
    """The CSS class of the frame shown when the controls are at ``positions`` (each control's index among
    its values): ``tsx-frame-2-0``. The browser tests read it to know which frame the page shows."""
    return "tsx-frame-" + "-".join(str(k) for k in positions)


def explorer(controls: Mapping[str, widgets.ValueWidget], draw: Callable[..., Figure]) -> widgets.VBox:
    """Controls above a figure; ``draw(**values)`` returns the figure for the current values.

    The figure for each combination of control values is a *frame*: a PNG image in a tree of ``Stack``
    widgets, one level per control, whose shown child is tied to the control by ``jslink``. The link runs
    in the browser, so the page switches frames without a kernel — in JupyterLab and in the static book
    alike. In a kernel a frame is drawn the first time its values are chosen; with the environment variable
    ``TRAINSYS_WIDGET_FRAMES=all`` (set by the book's build) every frame is drawn up front and saved with
    the page.
    """
    names = list(controls)
    axes = [_positions(name, controls[name]) for name in names]
    frames: dict[tuple[int, ...], widgets.Image] = {}

    def tree(prefix: tuple[int, ...]) -> widgets.Widget:
        level = len(prefix)
        if level == len(names):
            frames[prefix] = widgets.Image(format="png")
            frames[prefix].add_class(frame_class(prefix))
            return frames[prefix]
        values, trait = axes[level]
        stack = widgets.Stack([tree(prefix + (k,)) for k in range(len(values))],
                              selected_index=values.index(controls[names[level]].value))
        widgets.jslink((controls[names[level]], trait), (stack, "selected_index"))
        return stack

    def fill(key: tuple[int, ...]) -> None:
        if not frames[key].value:
            frames[key].value = _png(draw(**{name: axes[i][0][k] for i, (name, k) in enumerate(zip(names, key))}))

    def current() -> tuple[int, ...]:
        return tuple(axes[i][0].index(controls[name].value) for i, name in enumerate(names))

    root = tree(())
    for control in controls.values():
        control.observe(lambda _change: fill(current()), names="value")
    if os.environ.get(FRAMES_ENV) == "all":
        for key in frames:
            fill(key)
    else:
        fill(current())
    return widgets.VBox([widgets.HBox(list(controls.values())), root])


class TwinnedExplorer(widgets.VBox):
    """An explorer with a JavaScript twin in the static book (``book/explorer/*.js``, tested to agree).

    Its display carries the widget for JupyterLab and, as ``text/html``, the twin's mount point
    (``<div data-trainsys-...-explorer>``) for the book, whose build prefers HTML to a widget view
    (``nb_mime_priority_overrides`` in ``_config.yml``) and loads the twin's script on that page
    (``book/_ext/offline_pages.py``). Only explorers whose every control combination cannot be kept as
    frames are twinned.
    """

    def __init__(self, children: Sequence[widgets.Widget], marker: str) -> None:
        super().__init__(children)
        self._marker = marker

    def _repr_mimebundle_(self, **kwargs: object) -> dict:
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/html"] = f"<div {self._marker}></div>"
        return bundle


def _slider(description: str, options: Sequence[int], value: int) -> widgets.SelectionSlider:
    return widgets.SelectionSlider(options=list(options), value=value, description=description,
                                   continuous_update=False, style={"description_width": "initial"},
                                   layout=widgets.Layout(width="420px"))


def accumulation_explorer(n: int = 4096, d_in: int = 784, d_hidden: int = 512, d_out: int = 10) -> widgets.VBox:
    """Micro-batch count → peak memory of a gradient-accumulation step (Part 2's estimate)."""
    counts = [m for m in (1, 2, 4, 8, 16, 32, 64, 128) if m <= n]

    def draw(num_micro_batches: int) -> Figure:
        peaks = [estimate_accumulation_peak_bytes(n, d_in, d_hidden, d_out, m) / MiB for m in counts]
        timeline = accumulation_memory_timeline(n, d_in, d_hidden, d_out, num_micro_batches)
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
        left.loglog(counts, peaks, "o-", color="tab:blue", base=2)
        left.loglog(counts, [peaks[0] / m for m in counts], ":", color="gray", base=2, label="full batch / M")
        left.plot([num_micro_batches], [peaks[counts.index(num_micro_batches)]], "o", ms=11, mfc="none", color="tab:red")
        left.set_xlabel("micro-batches M"); left.set_ylabel("peak MiB"); left.legend(fontsize=8)
        left.set_title(f"n={n}, {d_in}→{d_hidden}→{d_out}, float32")
        labels, values = zip(*timeline)
        right.barh(range(len(values)), [v / MiB for v in values], color="tab:blue")
        right.set_yticks(range(len(values)), labels, fontsize=7); right.invert_yaxis()
        right.set_xlabel("MiB alive"); right.set_title(f"the step's busiest moments, M={num_micro_batches}")
        fig.tight_layout()
        return fig

    return explorer({"num_micro_batches": _slider("micro-batches M", counts, counts[min(2, len(counts) - 1)])}, draw)


def checkpointing_explorer(layer_widths: Sequence[int] | None = None, batch: int = 1024) -> widgets.VBox:
    """Segment size → peak memory and recomputation of a checkpointed pass (Part 3's estimate)."""
    widths = list(layer_widths) if layer_widths is not None else [64] + [256] * 15 + [8]
    L = len(widths) - 1
    sizes = list(range(1, L + 1))

    def draw(segment_size: int) -> Figure:
        estimates = [estimate_checkpointing_memory_savings(widths, batch, s) for s in sizes]
        peaks = [e["checkpointed_peak_bytes"] / MiB for e in estimates]
        extra = [100 * e["extra_compute_fraction"] for e in estimates]
        chosen = estimates[segment_size - 1]
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        ax.plot(sizes, peaks, "o-", color="tab:blue", label="peak memory (MiB)")
        ax.axhline(chosen["plain_peak_bytes"] / MiB, ls=":", color="gray", label="no checkpointing")
        ax.plot([segment_size], [peaks[segment_size - 1]], "o", ms=12, mfc="none", color="tab:red")
        ax.set_xlabel("segment size s (layers)"); ax.set_ylabel("MiB")
        twin = ax.twinx()
        twin.plot(sizes, extra, "s--", ms=3, color="tab:orange", label="extra compute (%)")
        twin.set_ylabel("extra compute, % of a step", color="tab:orange")
        ax.set_title(f"L={L}, batch={batch}: s={segment_size} keeps {peaks[segment_size - 1]:.1f} MiB, "
                     f"recomputes {chosen['recomputed_layers']} layers (+{extra[segment_size - 1]:.0f}%)", fontsize=9)
        handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        twin.legend(handles, [h.get_label() for h in handles], loc="lower right", fontsize=8)
        fig.tight_layout()
        return fig

    best = estimate_checkpointing_memory_savings(widths, batch, 1)["optimal_segment_size"]
    return explorer({"segment_size": _slider("segment size s", sizes, best)}, draw)


def precision_explorer(d_in: int = 784, d_hidden: int = 1024, d_out: int = 10, batch: int = 512) -> widgets.VBox:
    """Precision → bytes per tensor class of the two-layer MLP's training step (Part 4): float32, float16
    mixed and bfloat16 mixed (the same bytes as float16, without a loss scale)."""
    keys = {"float32": "float32", "float16 mixed": "mixed", "bfloat16 mixed": "mixed_bf16"}
    precisions = list(keys)
    roles = ["float32 weights", "16-bit weight copy", "16-bit gradients", "float32 gradients", "activations"]

    def role(label: str) -> str:  # the class of a training_memory_by_precision entry, whatever its dtype
        if label.startswith("activations"):
            return "activations"
        if label.startswith("gradients (float16)") or label.startswith("gradients (bfloat16)"):
            return "16-bit gradients"
        if "gradients" in label:
            return "float32 gradients"
        return "16-bit weight copy" if "copy" in label else "float32 weights"

    def draw(precision: str) -> Figure:
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        colors = dict(zip(roles, plt.cm.tab10.colors))
        longest = 0.0
        for row, name in enumerate(precisions):
            parts = training_memory_by_precision(d_in, d_hidden, d_out, batch, keys[name])
            left = 0.0
            for label, nbytes in parts.items():
                ax.barh(row, nbytes / MiB, left=left, color=colors[role(label)],
                        edgecolor="black" if name == precision else "none")
                left += nbytes / MiB
            ax.text(left, row, f" {left:.2f} MiB", va="center", fontsize=8)
            longest = max(longest, left)
        ax.set_yticks(range(len(precisions)), precisions); ax.set_xlabel("MiB"); ax.invert_yaxis()
        ax.set_xlim(0, 1.18 * longest)
        ax.set_title(f"{d_in}→{d_hidden}→{d_out} MLP, batch {batch}: bytes per tensor class (mixed: float32 master; "
                     "bfloat16 needs no loss scale)", fontsize=8)
        ax.legend(handles=[Patch(color=colors[r], label=r) for r in roles], fontsize=7, ncol=5, loc="upper center",
                  bbox_to_anchor=(0.5, -0.22))
        fig.tight_layout()
        return fig

    return explorer({"precision": widgets.ToggleButtons(options=precisions, value=precisions[1],
                                                         description="precision")}, draw)


def diloco_explorer(rounds_budget_steps: int = 200) -> widgets.VBox:
    """H (inner steps) and k (workers) → DiLoCo's held-out accuracy vs bytes, beside the synchronous baseline.

    Every setting trains for the same total number of inner steps per worker (``rounds_budget_steps``),
    so moving H trades communication for staleness at equal compute (Module 2, Part 7).
    """
    from trainsys.diloco.loop import train_diloco, train_synchronous_baseline

    def draw(inner_steps: int, num_workers: int) -> Figure:
        config = {"inner_steps": inner_steps, "num_workers": num_workers,
                  "rounds": max(rounds_budget_steps // inner_steps, 1), "progress": False}
        diloco = train_diloco(config)
        sync = train_synchronous_baseline(config)
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        for record, label, style in ((sync, "synchronous baseline", "s--"), (diloco, f"DiLoCo, H={inner_steps}", "o-")):
            history = record["history"]
            ax.semilogx([h["cumulative_bytes"] for h in history], [h["heldout_accuracy"] for h in history], style,
                        ms=3, label=label)
        ax.set_xlabel("bytes sent by all workers (cumulative)"); ax.set_ylabel("held-out accuracy")
        ax.set_title(f"k={num_workers} workers, {config['rounds'] * inner_steps} inner steps each: "
                     f"{sync['history'][-1]['cumulative_bytes'] / diloco['history'][-1]['cumulative_bytes']:.0f}x "
                     "fewer bytes", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    return explorer({"inner_steps": _slider("inner steps H", [1, 5, 10, 25, 50, 100], 25),
                     "num_workers": _slider("workers N", [1, 2, 4, 8], 4)}, draw)


def fedavg_explorer(rounds: int = 15, epochs: Sequence[int] = (1, 2, 5, 10),
                    fractions: Sequence[float] = (0.025, 0.1, 0.2, 0.5, 1.0)) -> widgets.VBox:
    """Local epochs E and client fraction C → FedAvg's test-accuracy curve, IID and pathological non-IID.

    Every frame is two FedAvg runs, so a lesson explores the knob it is about and fixes the other one:
    ``fedavg_explorer(fractions=[0.1])`` varies E only, ``fedavg_explorer(epochs=[1])`` varies C only. A knob
    given one value has no control.
    """
    from trainsys.fedavg.server import run_fedavg

    epochs, fractions = list(epochs), list(fractions)
    if not epochs or not fractions:
        raise ValueError(f"epochs and fractions need at least one value each, got epochs={epochs}, "
                         f"fractions={fractions}")

    def draw(epochs: int, fraction: float) -> Figure:
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        for partition, style in (("iid", "o-"), ("shards", "s--")):
            run = run_fedavg({"epochs": epochs, "fraction": fraction, "rounds": rounds, "partition": partition})
            ax.plot([h["round"] for h in run["history"]], [h["test_accuracy"] for h in run["history"]], style, ms=3,
                    label="IID" if partition == "iid" else "non-IID (2 label shards per client)")
        ax.set_xlabel("communication round"); ax.set_ylabel("test accuracy"); ax.set_ylim(0, 1)
        ax.set_title(f"FedAvg, E={epochs} local epochs, C={fraction} of 40 clients per round", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    controls = {}
    if len(epochs) > 1:
        controls["epochs"] = _slider("local epochs E", epochs, epochs[0])
    if len(fractions) > 1:
        controls["fraction"] = _slider("client fraction C", fractions, 0.1 if 0.1 in fractions else fractions[0])
    fixed = {"epochs": epochs[0], "fraction": fractions[0]}
    return explorer(controls, lambda **values: draw(**{**fixed, **values}))


def memory_explorer() -> widgets.VBox:
    """Precision, workers, ZeRO stage, micro-batches, segment size, width, depth, batch → bytes per worker.

    Computed by :func:`trainsys.memtrain.memory.explore_memory` — the formulas the lessons derive; the
    book's page runs their JavaScript twin (``book/explorer/memory_explorer.js``), tested to agree.
    """
    from trainsys.memtrain.memory import explore_memory

    parts = ("parameters", "gradients", "optimizer_states", "activations")

    def draw(precision: str, num_workers: int, zero_stage: int, num_micro_batches: int, segment_size: str,
             width: int, depth: int, batch: int) -> Figure:
        seg = None if segment_size == "off" else min(int(segment_size), depth)
        micro = min(num_micro_batches, -(-batch // num_workers))
        r = explore_memory({"precision": precision, "num_workers": num_workers, "zero_stage": zero_stage,
                            "num_micro_batches": micro, "segment_size": seg, "width": width, "depth": depth,
                            "batch": batch})
        fig, ax = plt.subplots(figsize=(8, 2.6))
        left = 0.0
        for color, part in zip(plt.cm.tab10.colors, parts):
            ax.barh(0, r[part] / MiB, left=left, color=color, label=f"{part.replace('_', ' ')} {r[part] / MiB:.1f}")
            left += r[part] / MiB
        ax.set_yticks([]); ax.set_xlabel("MiB per worker")
        ax.set_title(f"total {r['total'] / MiB:.1f} MiB per worker · sends {r['communication_bytes'] / MiB:.1f} MiB "
                     f"per step · recompute +{100 * r['recompute_fraction']:.0f}%", fontsize=9)
        ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.35))
        fig.tight_layout()
        return fig

    def pick(name: str, options: list, value: object) -> widgets.Dropdown:
        return widgets.Dropdown(options=options, value=value, description=name, style={"description_width": "initial"},
                                layout=widgets.Layout(width="210px"))

    controls = {
        "precision": pick("precision", ["fp32", "mixed"], "mixed"),
        "num_workers": pick("workers N", [1, 2, 4, 8, 16, 64], 4),
        "zero_stage": pick("ZeRO stage", [0, 1, 2, 3], 1),
        "num_micro_batches": pick("micro-batches M", [1, 2, 4, 8, 16], 2),
        "segment_size": pick("checkpoint segment s", ["off", "1", "2", "3", "4", "6", "8", "12", "16"], "4"),
        "width": pick("width", [256, 512, 1024, 2048, 4096], 1024),
        "depth": pick("depth (layers)", [4, 8, 16, 24, 32], 16),
        "batch": pick("batch", [64, 256, 1024, 4096], 1024),
    }
    rows = list(controls.values())
    return TwinnedExplorer([widgets.VBox([widgets.HBox(rows[:4]), widgets.HBox(rows[4:])]), _live(controls, draw)],
                           "data-trainsys-memory-explorer")


def transformer_memory_explorer() -> widgets.VBox:
    """A transformer (preset or custom) and its training setup → bytes per worker against a device budget.

    Computed by :func:`trainsys.memtrain.transformer_memory.transformer_memory`: parameters, gradients,
    optimizer state and activations as a stacked bar with the budget line, "fits / does not fit" and the
    smallest change that makes it fit (drawn as a second bar). The book's page runs the JavaScript twin
    (``book/explorer/transformer_explorer.js``), tested to agree.
    """
    from trainsys.memtrain.transformer_memory import (
        DEVICE_GB, MODELS, PRECISIONS, PRESETS, RECOMPUTE, transformer_memory)

    parts = ("parameters", "gradients", "optimizer_states", "activations")
    GB = 1e9

    def pick(name: str, options: list, value: object, width: str = "230px") -> widgets.Dropdown:
        return widgets.Dropdown(options=options, value=value, description=name,
                                style={"description_width": "initial"}, layout=widgets.Layout(width=width))

    def number(name: str, value: int) -> widgets.IntText:
        return widgets.IntText(value=value, description=name, style={"description_width": "initial"},
                               layout=widgets.Layout(width="190px"))

    setup = {
        "model": pick("model", list(MODELS), "llama-3-8b"),
        "seq_len": pick("sequence length", [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768], 1024),
        "micro_batch_size": pick("micro-batch b", [1, 2, 4, 8, 16, 32, 64], 8),
        "grad_accum_steps": pick("accumulation A", [1, 2, 4, 8, 16, 32, 64, 128], 4),
        "num_workers": pick("workers N", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], 8),
        "precision": pick("precision", list(PRECISIONS), "mixed_bf16"),
        "recompute": pick("recomputation", list(RECOMPUTE), "none"),
        "zero_stage": pick("ZeRO stage", [0, 1, 2, 3], 1),
        "device_gb": pick("device GB", list(DEVICE_GB), 80),
    }
    start = PRESETS["llama-3-8b"]
    arch = {
        "style": pick("style", ["gpt2", "llama"], start["style"], "160px"),
        "num_layers": number("layers", start["num_layers"]),
        "hidden_size": number("hidden", start["hidden_size"]),
        "num_heads": number("heads", start["num_heads"]),
        "num_kv_heads": number("KV heads", start["num_kv_heads"]),
        "ffn_size": number("FFN", start["ffn_size"]),
        "vocab_size": number("vocabulary", start["vocab_size"]),
        "max_positions": number("positions", 1024),
        "tied_embeddings": widgets.Checkbox(value=start["tied_embeddings"], description="tied embeddings",
                                            indent=False, layout=widgets.Layout(width="150px")),
    }
    output = widgets.Output()
    busy = [False]

    def config() -> dict:
        c = {name: control.value for name, control in setup.items()}
        if c["model"] == "custom":
            a = {name: control.value for name, control in arch.items()}
            if a["style"] != "gpt2":
                a["max_positions"] = None
            c["architecture"] = a
        return c

    def draw(c: dict) -> Figure:
        r = transformer_memory(c)
        after = transformer_memory(r["suggestion"]["config"]) if r["suggestion"] is not None else None
        rows = [("now", r)] + ([("after the change", after)] if after is not None else [])
        fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.55 * len(rows)))
        for y, (_, report) in enumerate(rows):
            left = 0.0
            for color, part in zip(plt.cm.tab10.colors, parts):
                ax.barh(y, report[part] / GB, left=left, color=color,
                        label=f"{part.replace('_', ' ')} {report[part] / GB:.1f} GB" if y == 0 else None)
                left += report[part] / GB
            ax.text(left, y, f" {left:.1f} GB", va="center", fontsize=8)
        ax.axvline(r["budget_bytes"] / GB, color="firebrick", ls="--", label=f"budget {r['budget_bytes'] / GB:g} GB")
        ax.set_yticks(range(len(rows)), [name for name, _ in rows]); ax.invert_yaxis()
        ax.set_xlabel("GB per worker")
        verdict = "fits" if r["fits"] else "does not fit"
        ax.set_title(f"{c['model']}: {r['num_parameters'] / 1e9:.3f} B parameters · {r['total'] / GB:.1f} GB per "
                     f"worker · {verdict}", fontsize=9)
        if r["suggestion_status"] == "found":
            s = r["suggestion"]
            text = "smallest change: " + "; ".join(f"{k} {old} → {new}" for k, old, new in s["changes"])
            text += f" ({s['steps']} steps, global batch {r['global_batch']} → {s['global_batch']})"
        elif r["suggestion_status"] == "none fits":
            text = "nothing in the search (ZeRO, recomputation, micro-batch, workers) fits"
        else:
            text = f"fits with {(r['budget_bytes'] - r['total']) / GB:.1f} GB to spare"
        fig.text(0.01, 0.01, text, fontsize=8)
        ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.45))
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        return fig

    def redraw(_change: object = None) -> None:
        if busy[0]:
            return
        output.clear_output(wait=True)
        with output:
            try:
                fig = draw(config())
            except (TypeError, ValueError) as error:
                print(f"invalid configuration: {error}")
                return
            display(fig)
            plt.close(fig)

    def on_model(change: dict) -> None:
        busy[0] = True
        try:
            source = PRESETS.get(change["new"]) or PRESETS.get(change["old"])
            if source is not None:
                for name, control in arch.items():
                    control.value = source[name] if source[name] is not None else 1024
            for control in arch.values():
                control.disabled = change["new"] != "custom"
        finally:
            busy[0] = False
        redraw()

    setup["model"].observe(on_model, names="value")
    for name, control in {**setup, **arch}.items():
        if name != "model":
            control.observe(redraw, names="value")
    for control in arch.values():
        control.disabled = True
    redraw()
    s, a = list(setup.values()), list(arch.values())
    from trainsys.memtrain.memory_grid import measured_error_note
    note = widgets.HTML(f"<small>{measured_error_note()}</small>")
    return TwinnedExplorer([widgets.HBox(s[:5]), widgets.HBox(s[5:]), widgets.HBox(a[:5]), widgets.HBox(a[5:]), output,
                            note], "data-trainsys-transformer-explorer")


def formats_explorer(steps: int = 200, seed: int = 0) -> widgets.VBox:
    r"""Format × scaling → where a real gradient's magnitudes fall in the format's range, and what the cast does.

    The gradient is :math:`\partial L/\partial\hat Y = \frac{2}{n\,d_{out}}(\hat Y - Y)` of the Part 1 MLP at step
    ``steps`` of plain float32 training: the problem, generators, learning rate and the amax history length of
    :func:`trainsys.memtrain.formats.train_in_format`, read from its defaults (so this is the tensor its float32 run
    quantizes as ``dY_hat`` at that step). Each frame casts it with
    :func:`~trainsys.memtrain.formats.quantize_dequantize` (FP8 casts saturate, as in ``train_in_format``) at a
    scale :math:`s`: 1 (``"none"``); ``train_in_format``'s static loss scale :math:`2^{12}` (``"loss"``); or the
    per-tensor delayed scale :func:`~trainsys.memtrain.formats.delayed_scale` computes from the amaxes of the
    ``amax_history_len`` gradients before it (``"delayed"``). On the gradient's axis the format's ranges sit at
    their values divided by :math:`s`: rounded to 0 below half the smallest subnormal, subnormal below the
    smallest normal, normal up to the largest finite value, overflow above it (a 16-bit value less than half a
    step above it still rounds down to it). The shares, of the gradient's
    non-zero entries, are counted on the cast: exactly 0, subnormal (non-zero, below the smallest normal), overflow
    (:math:`\pm\infty`/NaN, or clamped to :math:`\pm` max by a saturating cast); and the median of
    :math:`|\hat g - g|/|g|`.
    """
    import inspect

    from trainsys._validation import require_int
    from trainsys.memtrain import formats as fm
    from trainsys.memtrain.mlp import (
        init_mlp_params,
        make_synthetic_regression_batch,
        mlp_backward,
        mlp_forward,
        mse_loss_and_grad,
        sgd_step,
    )

    steps = require_int("steps", steps, minimum=1)
    seed = require_int("seed", seed, minimum=0)
    run = {name: p.default for name, p in inspect.signature(fm.train_in_format).parameters.items()
           if p.default is not inspect.Parameter.empty}
    X, Y = make_synthetic_regression_batch(run["n"], run["d_in"], run["d_out"], np.random.default_rng(seed))
    params = init_mlp_params(run["d_in"], run["d_hidden"], run["d_out"], np.random.default_rng(seed + 1))
    history = fm.init_amax_history(run["amax_history_len"])
    for _ in range(steps):
        Y_hat, cache = mlp_forward(params, X)
        _, grad = mse_loss_and_grad(Y_hat, Y)
        history = fm.update_amax_history(history, grad)  # the amaxes the delayed scale of step `steps` is made from
        params = sgd_step(params, mlp_backward(params, cache, grad), run["lr"])
    loss, grad = mse_loss_and_grad(mlp_forward(params, X)[0], Y)
    g = grad[grad != 0].astype(np.float32)  # float32 already; zeros cast to zero in every format
    log_g = np.log10(np.abs(g.astype(np.float64)))
    lo, hi = np.floor(log_g.min()) - 2, np.ceil(log_g.max()) + 3  # room for the bands a scale moves
    bins = np.linspace(lo, hi, int(8 * (hi - lo)) + 1)  # 8 bins per decade
    loss_scale = float(run["loss_scale"])
    formats = ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
    scalings = [("none", "none"), (f"loss scale 2^{np.log2(loss_scale):.0f}", "loss"), ("delayed (amax)", "delayed")]

    def draw(format: str, scaling: str) -> Figure:  # noqa: A002 - the control's name
        info = fm.format_info(format)
        saturate = format in fm.FP8_FORMATS
        if scaling == "none":
            scale, how = 1.0, "no scaling (s = 1)"
        elif scaling == "loss":
            scale, how = loss_scale, f"loss scale s = {loss_scale:g}"
        else:
            scale = fm.delayed_scale(history, format, run["margin"])
            how = (f"delayed scale s = {scale:.4g} from amax {float(history.max()):.3g} "
                   f"of the last {history.size} steps")
            if scale == float(np.finfo(np.float32).max):
                how += " (max / amax exceeds float32: clamped to its largest)"
        scaled = g * np.float32(scale)  # what quantize_dequantize casts
        with np.errstate(over="ignore", invalid="ignore"):
            stored = fm.cast(scaled, format, saturate=saturate).astype(np.float32)
            back = fm.quantize_dequantize(g, format, scale, saturate=saturate)
            rel = np.abs(back.astype(np.float64) - g) / np.abs(g.astype(np.float64))
        zero = int(np.count_nonzero(back == 0))
        subnormal = int(np.count_nonzero((stored != 0) & (np.abs(stored) < info["smallest_normal"])))
        overflow = int(np.count_nonzero(np.abs(scaled) > info["max"] if saturate else ~np.isfinite(stored)))

        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        edges = [lo, np.log10(info["smallest_subnormal"] / 2 / scale), np.log10(info["smallest_normal"] / scale),
                 np.log10(info["max"] / scale), hi]
        names = ["→ 0", "subnormal", "normal", "saturates" if saturate else "overflow"]
        for (left, right), color, name in zip(zip(edges, edges[1:]), ("0.8", "0.91", "white", "mistyrose"), names):
            left, right = max(left, lo), min(right, hi)
            if right > left:
                ax.axvspan(left, right, color=color, zorder=0, lw=0)
                if right - left > 0.6:
                    ax.text((left + right) / 2, 0.97, name, transform=ax.get_xaxis_transform(), ha="center",
                            va="top", fontsize=8)
        ax.hist(log_g, bins=bins, color="tab:blue", alpha=0.55, label="|∂L/∂Ŷ|, float32")
        kept = back[(back != 0) & np.isfinite(back)]
        ax.hist(np.log10(np.abs(kept.astype(np.float64))), bins=bins, histtype="step", color="black", lw=1,
                label=f"after the cast ({zero:,} became 0)")
        ax.set_xlim(lo, hi); ax.set_yscale("log"); ax.set_ylim(0.7, 3 * len(g))
        ax.set_xlabel("log10 |gradient entry|"); ax.set_ylabel("entries per bin")
        ax.legend(loc="upper right", bbox_to_anchor=(1, 0.88), fontsize=7, framealpha=0.9)
        n = g.size
        ax.text(0.01, 0.86, f"of {n:,} entries:\nrounded to 0  {zero:,} ({100 * zero / n:.2f}%)\n"
                f"subnormal  {subnormal:,} ({100 * subnormal / n:.2f}%)\n"
                f"overflow  {overflow:,} ({100 * overflow / n:.2f}%)\n"
                f"median relative error  {np.median(rel):.2e}", transform=ax.transAxes, va="top", fontsize=7,
                bbox={"facecolor": "white", "alpha": 0.9, "edgecolor": "0.6"})
        ax.set_title(f"∂L/∂Ŷ of the Part 1 MLP at step {steps} (float32 loss {loss:.3g}) → {format} "
                     f"({info['exponent_bits']} exponent, {info['mantissa_bits']} mantissa bits)\n{how}", fontsize=8)
        fig.tight_layout()
        return fig

    def toggles(description: str, options: list, value: str) -> widgets.ToggleButtons:
        return widgets.ToggleButtons(options=options, value=value, description=description,
                                     style={"button_width": "auto"})

    box = explorer({"format": toggles("format", formats, "float16"),
                    "scaling": toggles("scaling", scalings, "none")}, draw)
    box.children[0].layout.flex_flow = "row wrap"  # the two rows of buttons fit a narrow page
    return box
