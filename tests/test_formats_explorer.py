"""The formats explorer (Lesson 19's Checkpoint): 12 frames, the shares it shows equal an independent
computation with torch's casts, the story the lesson tells holds, and drawing is deterministic."""

from __future__ import annotations

import re

import ipywidgets
import matplotlib.text
import numpy as np
import pytest
import torch

import trainsys.widgets as w
from trainsys.memtrain import formats as fm
from trainsys.memtrain import mlp

FORMATS = ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
SCALINGS = ["none", "loss", "delayed"]
SHARES = re.compile(r"of ([\d,]+) entries:\nrounded to 0  ([\d,]+) \([\d.]+%\)\nsubnormal  ([\d,]+) \([\d.]+%\)\n"
                    r"overflow  ([\d,]+) \([\d.]+%\)\nmedian relative error  (\S+)")


def _frames(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[int, int], dict]:
    """Build the explorer with every frame drawn; ``{(format index, scaling index): {"png", "texts"}}``."""
    monkeypatch.setenv(w.FRAMES_ENV, "all")
    drawn: dict[bytes, list[str]] = {}
    png = w._png

    def recording(fig):
        texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]
        data = png(fig)
        drawn[data] = texts
        return data

    monkeypatch.setattr(w, "_png", recording)
    box = w.formats_explorer()
    monkeypatch.setattr(w, "_png", png)

    def leaves(widget):
        return [widget] if isinstance(widget, ipywidgets.Image) else [x for c in widget.children for x in leaves(c)]

    frames = {}
    for image in leaves(box.children[1]):
        name = next(c for c in image._dom_classes if c.startswith("tsx-frame-"))
        key = tuple(int(k) for k in name.split("-")[2:])
        frames[key] = {"png": image.value, "texts": drawn[image.value]}
    return frames


@pytest.fixture(scope="module")
def frames() -> dict[tuple[int, int], dict]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _frames(monkeypatch)


def _shown(frame: dict) -> dict:
    """The numbers the frame's text box shows."""
    (text,) = [t for t in frame["texts"] if SHARES.fullmatch(t)]
    total, zero, subnormal, overflow, median = SHARES.fullmatch(text).groups()
    count = lambda s: int(s.replace(",", ""))  # noqa: E731
    return {"text": text, "n": count(total), "zero": count(zero), "subnormal": count(subnormal),
            "overflow": count(overflow), "median": float(median)}


def test_twelve_distinct_small_frames_titled_by_their_controls(frames: dict) -> None:
    assert sorted(frames) == [(f, s) for f in range(4) for s in range(3)]
    assert len({frame["png"] for frame in frames.values()}) == 12
    assert all(len(frame["png"]) < 60_000 for frame in frames.values())  # measured 28-35 KB
    how = {"none": "no scaling", "loss": "loss scale s = 4096", "delayed": "delayed scale s = "}
    for (f, s), frame in frames.items():
        (title,) = [t for t in frame["texts"] if t.startswith("∂L/∂Ŷ")]
        assert f"→ {FORMATS[f]} (" in title and how[SCALINGS[s]] in title


def _gradient_and_history() -> tuple[np.ndarray, np.ndarray]:
    """∂L/∂Ŷ at step 200 of train_in_format's float32 run (its defaults), and the amaxes of steps 184-199."""
    X, Y = mlp.make_synthetic_regression_batch(2048, 16, 8, np.random.default_rng(0))
    params = mlp.init_mlp_params(16, 32, 8, np.random.default_rng(1))
    amaxes = []
    for _ in range(200):
        Y_hat, cache = mlp.mlp_forward(params, X)
        _, dY = mlp.mse_loss_and_grad(Y_hat, Y)
        amaxes.append(np.abs(dY).max())
        params = mlp.sgd_step(params, mlp.mlp_backward(params, cache, dY), 0.2)
    _, dY = mlp.mse_loss_and_grad(mlp.mlp_forward(params, X)[0], Y)
    return dY.ravel(), np.array(amaxes[-16:], np.float32)


@pytest.mark.parametrize("f, s", [(0, 0), (2, 2)], ids=["float16-none", "e4m3-delayed"])
def test_shares_shown_equal_an_independent_computation_with_torch(frames: dict, f: int, s: int) -> None:
    g, amaxes = _gradient_and_history()
    assert np.count_nonzero(g) == g.size == 2048 * 8
    fmt, dtype = FORMATS[f], {"float16": torch.float16, "float8_e4m3fn": torch.float8_e4m3fn}[FORMATS[f]]
    finfo = torch.finfo(dtype)
    scale = np.float32(1.0) if SCALINGS[s] == "none" else np.float32(finfo.max) / amaxes.max()  # TE: fp8_max / amax
    scaled = torch.from_numpy(g.astype(np.float32)) * torch.tensor(float(scale), dtype=torch.float32)
    stored = scaled.to(dtype).float()  # torch's e4m3fn cast saturates, as the explorer's FP8 casts do
    back = (stored / torch.tensor(float(scale), dtype=torch.float32)).double().numpy()
    expected = {
        "n": g.size,
        "zero": int(np.count_nonzero(back == 0)),
        "subnormal": int(((stored != 0) & (stored.abs() < finfo.smallest_normal)).sum()),
        "overflow": int((scaled.abs() > finfo.max).sum() if fmt != "float16" else (~torch.isfinite(stored)).sum()),
        "median": float(f"{np.median(np.abs(back - g) / np.abs(g.astype(np.float64))):.2e}"),
    }
    shown = _shown(frames[f, s])
    assert {k: shown[k] for k in expected} == expected
    n = expected["n"]
    assert f"rounded to 0  {expected['zero']:,} ({100 * expected['zero'] / n:.2f}%)" in shown["text"]
    if SCALINGS[s] == "delayed":
        (title,) = [t for t in frames[f, s]["texts"] if t.startswith("∂L/∂Ŷ")]
        assert f"s = {float(scale):.4g} from amax {float(amaxes.max()):.3g} of the last 16 steps" in title


def test_what_the_lesson_says_each_format_does(frames: dict) -> None:
    shown = {(FORMATS[f], SCALINGS[s]): _shown(frame) for (f, s), frame in frames.items()}
    n = shown["float16", "none"]["n"]
    assert all(v["overflow"] == 0 for v in shown.values())  # measured: no frame overflows
    # bfloat16: float32's exponent range, so nothing below its normals whatever the scale
    assert all(shown["bfloat16", s]["zero"] == shown["bfloat16", s]["subnormal"] == 0 for s in SCALINGS)
    # float16 unscaled: measured 92.1% subnormal and 11 entries (0.07%) rounded to 0; the loss scale 2^12
    # leaves 0 rounded to 0 and 5 subnormal, and cuts the median relative error 6.0e-4 → 1.7e-4
    fp16, fp16_loss = shown["float16", "none"], shown["float16", "loss"]
    assert fp16["subnormal"] > 0.5 * n and 0 < fp16["zero"] < 0.01 * n
    assert fp16_loss["zero"] == 0 and fp16_loss["subnormal"] < 0.01 * n
    assert fp16_loss["median"] < 0.5 * fp16["median"]
    # FP8 unscaled: E4M3 rounds every entry to 0 (measured 100%), E5M2 a share (measured 18.4%);
    # with the delayed per-tensor scale almost none (measured 0 and 1)
    assert shown["float8_e4m3fn", "none"]["zero"] == n and shown["float8_e4m3fn", "none"]["median"] == 1.0
    assert 0.05 * n < shown["float8_e5m2", "none"]["zero"] < 0.5 * n
    assert shown["float8_e4m3fn", "delayed"]["zero"] < 0.001 * n and shown["float8_e5m2", "delayed"]["zero"] < 0.001 * n


def test_drawing_twice_gives_identical_png_bytes(frames: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    again = _frames(monkeypatch)
    assert {k: v["png"] for k, v in again.items()} == {k: v["png"] for k, v in frames.items()}


@pytest.mark.parametrize("kwargs, error", [({"steps": 0}, ValueError), ({"steps": 2.0}, TypeError),
                                           ({"seed": -1}, ValueError)])
def test_bad_arguments_are_refused_by_name(kwargs: dict, error: type) -> None:
    with pytest.raises(error, match=next(iter(kwargs))):
        w.formats_explorer(**kwargs)
