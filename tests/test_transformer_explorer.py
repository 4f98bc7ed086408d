"""The transformer memory explorer: published parameter counts, the paper's formulas, ZeRO, validation,
the smallest change, and the book's JavaScript twin giving identical numbers (node, random configurations).
"""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trainsys.memtrain.transformer_memory import (
    MAX_WORKERS, PRESETS, PUBLISHED_PARAMETERS, RECOMPUTE, activation_bytes, state_bytes, transformer_memory,
    transformer_parameter_count, validate_config)

ROOT = Path(__file__).resolve().parent.parent
JS = ROOT / "book/explorer/transformer_explorer.js"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is needed to run the JavaScript")


def base(**overrides) -> dict:
    config = {"model": "llama-3-8b", "seq_len": 4096, "micro_batch_size": 1, "grad_accum_steps": 8, "num_workers": 8,
              "precision": "mixed_bf16", "recompute": "none", "zero_stage": 0, "device_gb": 80}
    return {**config, **overrides}


def gpt_layer(h: int, a: int, **overrides) -> dict:
    return {"style": "gpt2", "num_layers": 1, "hidden_size": h, "num_heads": a, "num_kv_heads": a, "ffn_size": 4 * h,
            "vocab_size": 1000, "tied_embeddings": True, "max_positions": 1 << 20, **overrides}


# --- parameter counts ------------------------------------------------------------------------------
@pytest.mark.parametrize("model", sorted(PRESETS))
def test_preset_parameter_counts_match_the_published_sizes_to_one_percent(model: str) -> None:
    count = transformer_parameter_count(PRESETS[model])
    assert abs(count - PUBLISHED_PARAMETERS[model]) / PUBLISHED_PARAMETERS[model] < 0.01
    assert transformer_memory(base(model=model, seq_len=1024))["num_parameters"] == count


def test_preset_parameter_counts_exactly() -> None:
    # GPT-2 small is the Hugging Face checkpoint's count; Llama 3's are the released checkpoints' counts.
    assert transformer_parameter_count(PRESETS["gpt2-small"]) == 124_439_808
    assert transformer_parameter_count(PRESETS["llama-3-8b"]) == 8_030_261_248
    assert transformer_parameter_count(PRESETS["llama-3-70b"]) == 70_553_706_496


def test_parameter_formula_by_term() -> None:
    h, a, k, f, V, L = 64, 8, 2, 160, 1000, 3
    hkv = k * h // a
    llama = {"style": "llama", "num_layers": L, "hidden_size": h, "num_heads": a, "num_kv_heads": k, "ffn_size": f,
             "vocab_size": V, "tied_embeddings": False, "max_positions": None}
    assert transformer_parameter_count(llama) == L * (2 * h * h + 2 * h * hkv + 3 * h * f + 2 * h) + 2 * V * h + h
    gpt = {**llama, "style": "gpt2", "tied_embeddings": True, "max_positions": 128}
    assert transformer_parameter_count(gpt) == (L * (2 * h * h + 2 * h * hkv + 2 * h + 2 * hkv + 2 * h * f + f + h
                                                     + 4 * h) + V * h + 128 * h + 2 * h)


# --- activations: Korthikanti et al. 2022 ------------------------------------------------------------
SHAPES = [(s, b, h, a) for s, b, h, a in itertools.product([1, 128, 1000, 2048], [1, 3, 8], [64, 768, 4096],
                                                           [1, 4, 16, 32]) if h % a == 0]


@pytest.mark.parametrize("precision", ["mixed_fp16", "mixed_bf16"])
def test_gpt_layer_in_16_bit_is_the_papers_formula(precision: str) -> None:
    for s, b, h, a in SHAPES:
        arch = gpt_layer(h, a)
        none = activation_bytes(arch, s, b, precision, "none")
        # s·b·h·(34 + 5as/h), plus the s×s boolean causal mask the explicit attention builds in every layer
        assert none["per_layer"] == s * b * h * 34 + 5 * a * s * s * b + s * s
        assert activation_bytes(arch, s, b, precision, "selective")["per_layer"] == 34 * s * b * h
        full = activation_bytes(arch, s, b, precision, "full")
        assert full["per_layer"] == 2 * s * b * h
        # the paper's end terms: embedding dropout mask, final norm input, output projection input, fp32 logits
        assert none["outside"] == s * b * h * (1 + 2 + 2) + 4 * s * b * 1000
        # transients: selective rebuilds one layer's scores (5as²b), its mask and the per-head copies of Q, K, V
        # (2sbh each); full rebuilds the whole layer but its input
        assert activation_bytes(arch, s, b, precision, "selective")["recompute_peak"] == \
            5 * a * s * s * b + s * s + 3 * 2 * s * b * h
        assert full["recompute_peak"] == none["per_layer"] - 2 * s * b * h


def test_other_precisions_gqa_and_swiglu() -> None:
    s, b, h, a = 512, 2, 1024, 16
    # fp32: every activation 4 bytes, the two dropout masks still 1 byte → 2 × (34 − 2) + 2 = 66 sbh; scores 4+1+4
    assert activation_bytes(gpt_layer(h, a), s, b, "fp32", "none")["per_layer"] == \
        66 * s * b * h + 9 * a * s * s * b + s * s
    # fp8: the four GEMM inputs (QKV, output projection, FC1: h each; FC2: 4h) are stored in 1 byte → 34 − 7
    assert activation_bytes(gpt_layer(h, a), s, b, "fp8", "selective")["per_layer"] == 27 * s * b * h
    # Llama style in 16-bit: no dropout; K, V shrink by k/a; SwiGLU stores gate, up (16-bit) and the down input
    for k, f in [(16, 4096), (4, 2816), (1, 3584)]:
        arch = {"style": "llama", "num_layers": 1, "hidden_size": h, "num_heads": a, "num_kv_heads": k,
                "ffn_size": f, "vocab_size": 1000, "tied_embeddings": False, "max_positions": None}
        got = activation_bytes(arch, s, b, "mixed_bf16", "none")["per_layer"]
        assert got == s * b * (12 * h + 4 * h * k // a + 6 * f) + 2 * a * s * s * b + s * s


def test_activations_scale_with_layers_and_not_with_accumulation_workers_or_zero() -> None:
    r = transformer_memory(base())
    acts = r["activations"]
    assert acts == 32 * r["activations_per_layer"] + r["activations_outside_layers"] + r["activations_recompute_peak"]
    for change in ({"grad_accum_steps": 64}, {"num_workers": 64}, {"zero_stage": 3}):
        assert transformer_memory(base(**change))["activations"] == acts
    # everything doubles with the micro-batch but the causal mask, one s×s bool per layer for any batch
    assert transformer_memory(base(micro_batch_size=2))["activations"] == 2 * acts - 32 * 4096 * 4096


def test_recomputation_never_increases_memory() -> None:
    for model, s in [("gpt2-small", 1024), ("llama-3-8b", 8192), ("llama-3-70b", 2048)]:
        totals = [transformer_memory(base(model=model, seq_len=s, recompute=r))["activations"] for r in RECOMPUTE]
        assert totals[0] > totals[1] > totals[2]


# --- ZeRO -----------------------------------------------------------------------------------------
def test_zero_formulas() -> None:
    psi = 7_500_000_000
    for N in (1, 8, 64, 1000):
        got = [sum(state_bytes(psi, "mixed_bf16", N, z).values()) for z in range(4)]
        assert got == pytest.approx([16 * psi, 4 * psi + 12 * psi / N, 2 * psi + 14 * psi / N, 16 * psi / N],
                                    rel=1e-15)
        assert [sum(state_bytes(psi, p, N, 0).values()) for p in ("fp32", "mixed_fp16", "fp8")] == [16 * psi] * 3
        assert sum(state_bytes(psi, "fp32", N, 1).values()) == pytest.approx(8 * psi + 8 * psi / N, rel=1e-15)
    # the ZeRO paper's example: Ψ = 7.5B, N = 64 → 120, 31.4, 16.6, 1.9 GB
    paper = [sum(state_bytes(psi, "mixed_fp16", 64, z).values()) / 1e9 for z in range(4)]
    assert [round(x, 1) for x in paper] == [120.0, 31.4, 16.6, 1.9]


def test_report_adds_up() -> None:
    r = transformer_memory(base(zero_stage=2, recompute="selective"))
    assert r["total"] == r["parameters"] + r["gradients"] + r["optimizer_states"] + r["activations"]
    assert r["budget_bytes"] == 80e9 and r["global_batch"] == 64 and r["tokens_per_step"] == 64 * 4096


# --- validation -------------------------------------------------------------------------------------
CUSTOM = {"style": "llama", "num_layers": 4, "hidden_size": 256, "num_heads": 8, "num_kv_heads": 2,
          "ffn_size": 688, "vocab_size": 32000, "tied_embeddings": True, "max_positions": None}
INVALID = [
    (["not", "a", "dict"], TypeError, "config"),
    ({k: v for k, v in base().items() if k != "seq_len"}, ValueError, "seq_len"),
    ({**base(), "batch": 4}, ValueError, "batch"),
    (base(model="gpt3"), ValueError, "config['model']"),
    (base(model="custom"), ValueError, "config['architecture']"),
    ({**base(), "architecture": CUSTOM}, ValueError, "config['architecture']"),
    (base(seq_len=0), ValueError, "config['seq_len']"),
    (base(seq_len=2.5), TypeError, "config['seq_len']"),
    (base(model="gpt2-small", seq_len=2048), ValueError, "max_positions"),
    (base(micro_batch_size=True), TypeError, "config['micro_batch_size']"),
    (base(grad_accum_steps=0), ValueError, "config['grad_accum_steps']"),
    (base(num_workers=MAX_WORKERS + 1), ValueError, "config['num_workers']"),
    (base(precision="fp16"), ValueError, "config['precision']"),
    (base(recompute="partial"), ValueError, "config['recompute']"),
    (base(zero_stage=4), ValueError, "config['zero_stage']"),
    (base(device_gb=0), ValueError, "config['device_gb']"),
    (base(device_gb="80"), TypeError, "config['device_gb']"),
    (base(model="custom", architecture={**CUSTOM, "num_heads": 7}), ValueError, "['num_heads']"),
    (base(model="custom", architecture={**CUSTOM, "num_kv_heads": 3}), ValueError, "['num_kv_heads']"),
    (base(model="custom", architecture={**CUSTOM, "num_kv_heads": 16}), ValueError, "['num_kv_heads']"),
    (base(model="custom", architecture={**CUSTOM, "style": "bert"}), ValueError, "['style']"),
    (base(model="custom", architecture={**CUSTOM, "tied_embeddings": 1}), TypeError, "['tied_embeddings']"),
    (base(model="custom", architecture={**CUSTOM, "max_positions": 2048}), ValueError, "['max_positions']"),
    (base(model="custom", architecture={**CUSTOM, "style": "gpt2"}), TypeError, "['max_positions']"),
    (base(model="custom", architecture={**CUSTOM, "vocab_size": -1}), ValueError, "['vocab_size']"),
    (base(model="custom", architecture={k: v for k, v in CUSTOM.items() if k != "ffn_size"}), ValueError,
     "ffn_size"),
]


@pytest.mark.parametrize("config, error, name", INVALID)
def test_invalid_inputs_name_the_argument(config, error, name) -> None:
    with pytest.raises(error) as info:
        transformer_memory(config)
    assert name in str(info.value) and "got" in str(info.value)


# --- the smallest change ------------------------------------------------------------------------------
def _candidates(config: dict):
    """Every reachable configuration with its step count, independently of the module's search."""
    c = validate_config(config)
    b, A, N = c["micro_batch_size"], c["grad_accum_steps"], c["num_workers"]
    mbs = [d for d in range(b, 0, -1) if b % d == 0]
    workers = [N * 2**j for j in range(20) if N * 2**j <= MAX_WORKERS]
    first = RECOMPUTE.index(c["recompute"])
    for z, r, mb, w in itertools.product(range(c["zero_stage"], 4), RECOMPUTE[first:], mbs, workers):
        if w != N and z == 0:
            continue
        steps = (z - c["zero_stage"]) + (RECOMPUTE.index(r) - first) + mbs.index(mb) + workers.index(w)
        G = b * A * N
        acc = G // (mb * w) if G % (mb * w) == 0 else A * (b // mb)
        yield steps, {**config, "zero_stage": z, "recompute": r, "micro_batch_size": mb, "grad_accum_steps": acc,
                      "num_workers": w}


SEARCH_CASES = [
    base(),
    base(model="llama-3-70b", seq_len=8192, micro_batch_size=4, precision="fp8"),
    base(model="llama-3-70b", num_workers=1, zero_stage=0, device_gb=141),
    base(model="gpt2-small", seq_len=1024, micro_batch_size=64, num_workers=1, device_gb=24, precision="fp32"),
    base(model="gpt2-small", seq_len=1024, micro_batch_size=12, num_workers=3, zero_stage=1, device_gb=24),
    base(model="llama-3-8b", seq_len=32768, micro_batch_size=2, num_workers=64, zero_stage=3, device_gb=40),
    base(model="llama-3-8b", seq_len=2048, micro_batch_size=6, grad_accum_steps=3, num_workers=5, device_gb=24),
    base(model="custom", architecture=CUSTOM, seq_len=131072, micro_batch_size=8, device_gb=24),
]


@pytest.mark.parametrize("config", SEARCH_CASES)
def test_smallest_change_fits_and_is_minimal(config: dict) -> None:
    r = transformer_memory(config)
    candidates = [(steps, c, transformer_memory(c)) for steps, c in _candidates(config)]
    fitting = [(steps, got["total"]) for steps, c, got in candidates if steps > 0 and got["fits"]]
    if r["fits"]:
        assert r["suggestion_status"] == "not needed" and r["suggestion"] is None
        return
    if not fitting:
        assert r["suggestion_status"] == "none fits" and r["suggestion"] is None
        return
    s = r["suggestion"]
    assert r["suggestion_status"] == "found"
    after = transformer_memory(s["config"])
    assert after["fits"] and after["total"] == s["total"] and after["global_batch"] == s["global_batch"]
    best_steps = min(steps for steps, _ in fitting)
    assert s["steps"] == best_steps
    assert s["total"] == min(total for steps, total in fitting if steps == best_steps)
    for key, old, new in s["changes"]:
        assert config[key] == old and s["config"][key] == new and old != new
    if s["config"]["num_workers"] == config["num_workers"]:  # micro-batch changes keep the global batch
        assert s["global_batch"] == r["global_batch"]


def test_the_search_cases_cover_every_outcome() -> None:
    statuses = {transformer_memory(c)["suggestion_status"] for c in SEARCH_CASES}
    assert statuses == {"not needed", "found", "none fits"}


# --- the JavaScript twin ------------------------------------------------------------------------------
def random_configs(n: int, seed: int = 14) -> list[dict]:
    rng = random.Random(seed)
    configs = []
    while len(configs) < n:
        model = rng.choice(["gpt2-small", "llama-3-8b", "llama-3-70b", "custom", "custom"])
        config = {"model": model}
        if model == "custom":
            style = rng.choice(["gpt2", "llama"])
            heads = rng.choice([1, 2, 4, 8, 12, 16, 32, 64, 96])
            kv = rng.choice([d for d in range(1, heads + 1) if heads % d == 0]) if style == "llama" else heads
            hidden = heads * rng.choice([16, 32, 64, 80, 128])
            config["architecture"] = {
                "style": style, "num_layers": rng.randint(1, 128), "hidden_size": hidden, "num_heads": heads,
                "num_kv_heads": kv, "ffn_size": rng.choice([4 * hidden, rng.randint(1, 8 * hidden)]),
                "vocab_size": rng.randint(1, 256000), "tied_embeddings": rng.random() < 0.5,
                "max_positions": rng.choice([512, 1024, 2048, 8192]) if style == "gpt2" else None}
            limit = config["architecture"]["max_positions"] if style == "gpt2" else 131072
        else:
            limit = PRESETS[model]["max_positions"] or 131072
        config.update({
            "seq_len": rng.choice([s for s in (1, 7, 128, 512, 1000, 1024, 2048, 4096, 8192, 32768, 131072)
                                   if s <= limit]),
            "micro_batch_size": rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 1024]),
            "grad_accum_steps": rng.choice([1, 2, 3, 4, 8, 16, 64]),
            "num_workers": rng.choice([1, 2, 3, 8, 64, 1000, 4096]),
            "precision": rng.choice(["fp32", "mixed_fp16", "mixed_bf16", "fp8", "autocast_bf16"]),
            "recompute": rng.choice(RECOMPUTE), "zero_stage": rng.randint(0, 3),
            "device_gb": rng.choice([24, 40, 80, 141, 141, 0.5, 2.5, 1000])})
        configs.append(config)
    return configs


def run_js(expression: str, data: object) -> object:
    script = ("const m = require(process.argv[1]); const data = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              f"process.stdout.write(JSON.stringify({expression}));")
    result = subprocess.run([NODE, "-e", script, str(JS)], input=json.dumps(data), capture_output=True, text=True,
                            timeout=120, check=True)
    return json.loads(result.stdout, parse_int=float)  # JavaScript writes 3.2e16 as 32338214836502530


@needs_node
def test_javascript_and_python_agree_on_random_configurations() -> None:
    configs = random_configs(1500)
    python = [transformer_memory(c) for c in configs]
    assert {r["suggestion_status"] for r in python} == {"not needed", "found", "none fits"}
    assert sum(r["suggestion_status"] == "found" for r in python) > 300
    js = run_js("data.map(c => m.transformerMemory(c))", configs)
    mismatches = []
    for config, want, got in zip(configs, python, js):
        want = json.loads(json.dumps(want))  # tuples → lists, as JSON carries them
        if want != got:
            keys = [k for k in want if want[k] != got.get(k)]
            mismatches.append(f"{config}: {[(k, want[k], got.get(k)) for k in keys]}")
    assert not mismatches, f"{len(mismatches)} of {len(configs)} differ:\n" + "\n".join(mismatches[:5])


@needs_node
def test_javascript_and_python_agree_with_cpu_dropout_masks() -> None:
    """The measured comparison's variant (masks in the activation's dtype, as on CPU) is in the twin too."""
    configs = random_configs(300, seed=26)
    js = run_js("data.map(c => m.transformerMemory(c, 'dtype'))", configs)
    python = [json.loads(json.dumps(transformer_memory(c, dropout_masks="dtype"))) for c in configs]
    assert python == js
    assert any(p["activations"] != transformer_memory(c)["activations"] for c, p in zip(configs, python))


@needs_node
def test_the_page_prints_the_measured_errors_of_the_record(tmp_path: Path) -> None:
    """The errors the page shows beside its numbers are the record memory-gpt's (and the widget's sentence)."""
    from trainsys.memtrain.memory_grid import measured_error_note, measured_errors

    assert run_js("m.MEASURED_ERROR", None) == measured_errors()
    dom = tmp_path / "fakedom.js"
    dom.write_text(FAKE_DOM)
    script = ("const El = require(process.argv[2]); const m = require(process.argv[1]); const root = new El('div');"
              "m.mount(root); process.stdout.write(root.children[root.children.length - 1].innerHTML);")
    html = subprocess.run([NODE, "-e", script, str(JS), str(dom)], capture_output=True, text=True, timeout=60,
                          check=True).stdout
    note = re.search(r'data-quantity="measured_note">([^<]*)<', html).group(1)
    assert note == measured_error_note().replace("'", "\u2019")
    assert 'data-quantity="error_activations">measured: +4.3%' in html


def test_equality_is_exact_not_approximate() -> None:
    # == on floats in the parity test: the two sides must do the same operations in the same order
    r = transformer_memory(base(num_workers=3, zero_stage=3))
    assert r["parameters"] == 2 * 8_030_261_248 / 3


@needs_node
def test_javascript_rejects_what_python_rejects() -> None:
    cases = [c for c, _, _ in INVALID if isinstance(c, dict)]
    messages = run_js("data.map(c => { try { m.transformerMemory(c); return null; } catch (e) { return e.message; } })",
                      cases)
    for (config, _, name), message in zip([x for x in INVALID if isinstance(x[0], dict)], messages):
        assert message is not None, f"JavaScript accepted {config}"
        assert name in message, f"{message!r} does not name {name!r}"


# --- the book page and the widget --------------------------------------------------------------------------
FAKE_DOM = r"""
// A minimal DOM: enough for the explorer's mount() (elements, attributes, events, innerHTML as a string).
function El(tag) { this.tagName = tag; this.children = []; this.attrs = {}; this.listeners = {}; this.textContent = "";
  this.innerHTML = ""; this.value = ""; this.checked = false; this.disabled = false; }
El.prototype.setAttribute = function (k, v) { this.attrs[k] = String(v); if (k === "value") this.value = String(v); };
El.prototype.appendChild = function (c) { this.children.push(c); if (this.tagName === "select" && this.children.length === 1) this.value = c.attrs.value; return c; };
El.prototype.addEventListener = function (t, f) { (this.listeners[t] = this.listeners[t] || []).push(f); };
El.prototype.fire = function (t) { (this.listeners[t] || []).forEach(function (f) { f(); }); };
El.prototype.all = function () { var out = [this]; this.children.forEach(function (c) { out = out.concat(c.all()); }); return out; };
El.prototype.control = function (name) { return this.all().filter(function (e) { return e.attrs["data-control"] === name; })[0]; };
Object.defineProperty(El.prototype, "innerHTML", { get: function () { return this._html; },
  set: function (v) { this._html = v; if (v === "") this.children = []; } });
global.document = { createElement: function (t) { return new El(t); }, addEventListener: function () {} };
module.exports = El;
"""
PAGE_SCRIPT = r"""
const El = require(process.argv[2]); const m = require(process.argv[1]);
const root = new El("div"); m.mount(root);
const out = root.children[root.children.length - 1];
const read = q => (out.innerHTML.match(new RegExp('data-quantity="' + q + '">([^<]*)')) || [])[1];
const snap = () => ({ total: read("total"), fits: read("fits"), suggestion: read("suggestion"),
                      text: out.children.map(c => c.textContent).join(" ") });
const set = (name, value, event) => { const c = root.control(name); c.value = value; c.fire(event); return snap(); };
const steps = [snap(), set("zero_stage", "3", "change"), set("model", "gpt2-small", "change"),
               set("seq_len", "5", "input"), set("model", "custom", "change")];
steps.push({ disabled: root.control("num_layers").disabled, layers: root.control("num_layers").value });
steps.push(set("num_kv_heads", "5", "input"));
process.stdout.write(JSON.stringify(steps));
"""


@needs_node
def test_the_page_mounts_and_answers_its_controls(tmp_path: Path) -> None:
    """The page's code in node with a minimal DOM: numbers shown, controls change them, errors are shown."""
    dom = tmp_path / "fakedom.js"
    dom.write_text(FAKE_DOM)
    result = subprocess.run([NODE, "-e", PAGE_SCRIPT, str(JS), str(dom)], capture_output=True, text=True,
                            timeout=60, check=True)
    start, zero3, gpt2, too_long, custom, fields, bad_kv = json.loads(result.stdout)
    assert start["fits"] == "does not fit" and start["suggestion"].startswith("micro-batch 8 \u2192 4; accumulation")
    assert zero3["fits"] == "fits" and zero3["total"] != start["total"]
    assert gpt2["total"].endswith(" GB") and gpt2["total"] != zero3["total"]
    assert too_long.get("total") is None and "config['seq_len']" in too_long["text"]
    assert custom.get("total") is None  # the custom model starts from GPT-2's 1024 positions: 4096 tokens is still too long
    assert fields == {"disabled": False, "layers": "12"}
    assert "num_kv_heads" in bad_kv["text"]


def test_book_page_loads_the_explorer_offline_and_is_in_the_toc() -> None:
    page = (ROOT / "book/transformer_explorer.md").read_text()
    assert "data-trainsys-transformer-explorer" in page
    # The page only mounts the explorer; book/_ext/offline_pages.py adds the script to pages that mount it.
    assert not re.findall(r'<script[^>]*src="([^"]+)"', page)
    extension = (ROOT / "book/_ext/offline_pages.py").read_text()
    assert '"data-trainsys-transformer-explorer": "transformer_explorer.js"' in extension
    assert not re.search(r"(?:src|href)=[\"'](?:https?:)?//", page)
    assert not re.search(r"https?://", JS.read_text()), "the explorer's JavaScript must load nothing from elsewhere"
    toc = (ROOT / "_toc.yml").read_text()
    assert toc.index("file: book/memory_explorer") < toc.index("file: book/transformer_explorer")
    assert "transformer_explorer" in (ROOT / "book/m1/p7_memory_and_full_loop.md").read_text()


def test_widget_builds_and_reports() -> None:
    pytest.importorskip("ipywidgets")
    import matplotlib

    matplotlib.use("Agg")
    from trainsys.widgets import transformer_memory_explorer

    box = transformer_memory_explorer()
    model = box.children[0].children[0]
    model.value = "custom"
    assert not box.children[2].children[1].disabled  # the architecture fields open for a custom model
    model.value = "gpt2-small"
    assert box.children[2].children[1].value == 12 and box.children[2].children[1].disabled
