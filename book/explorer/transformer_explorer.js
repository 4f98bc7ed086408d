/*
 * The transformer memory explorer, without a kernel: the same formulas as
 * trainsys.memtrain.transformer_memory (Python), in the same order of floating-point operations, so that
 * both give identical numbers (tests/test_transformer_explorer.py runs this file in node on random
 * configurations). Sources: ZeRO (Rajbhandari et al. 2020) for weights, gradients and optimizer state;
 * Korthikanti et al. 2022 for the activations of a transformer layer; Micikevicius et al. 2022 and NVIDIA
 * Transformer Engine for what FP8 training stores. The derivation is in the Python module's docstring.
 */
(function (root) {
  "use strict";
  var PRESETS = {
    "gpt2-small": { style: "gpt2", num_layers: 12, hidden_size: 768, num_heads: 12, num_kv_heads: 12,
                    ffn_size: 3072, vocab_size: 50257, tied_embeddings: true, max_positions: 1024 },
    "llama-3-8b": { style: "llama", num_layers: 32, hidden_size: 4096, num_heads: 32, num_kv_heads: 8,
                    ffn_size: 14336, vocab_size: 128256, tied_embeddings: false, max_positions: null },
    "llama-3-70b": { style: "llama", num_layers: 80, hidden_size: 8192, num_heads: 64, num_kv_heads: 8,
                     ffn_size: 28672, vocab_size: 128256, tied_embeddings: false, max_positions: null }
  };
  var MODELS = ["gpt2-small", "llama-3-8b", "llama-3-70b", "custom"];
  var STYLES = ["gpt2", "llama"];
  var PRECISIONS = ["fp32", "mixed_fp16", "mixed_bf16", "fp8", "autocast_bf16"];
  var RECOMPUTE = ["none", "selective", "full"];
  var MAX_WORKERS = 65536;
  var ARCH_KEYS = ["style", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size", "vocab_size",
                   "tied_embeddings", "max_positions"];
  var CONFIG_KEYS = ["model", "seq_len", "micro_batch_size", "grad_accum_steps", "num_workers", "precision",
                     "recompute", "zero_stage", "device_gb"];
  // bytes per element: weights, gradients, optimizer state, stored activation e, stored GEMM input m
  var PRECISION_BYTES = { fp32: [4, 4, 8, 4, 4], mixed_fp16: [2, 2, 12, 2, 2], mixed_bf16: [2, 2, 12, 2, 2],
                          fp8: [2, 2, 12, 2, 1], autocast_bf16: [4, 4, 8, 2, 2] };
  // residual stream r; copies of the norm output read by Q, K, V and by the MLP (Llama); bytes w per GEMM weight copy
  var AUTOCAST_BYTES = { fp32: [4, 1, 1, 0], mixed_fp16: [2, 1, 1, 0], mixed_bf16: [2, 1, 1, 0], fp8: [2, 1, 1, 0],
                         autocast_bf16: [4, 3, 2, 2] };
  var DROPOUT_MASKS = ["bool", "dtype"];
  var GB = 1e9;
  // The largest error (%) of these formulas against the course's GPT measured on CPU: the record memory-gpt
  // (trainsys.memtrain.memory_grid.measured_errors); tests/test_transformer_explorer.py holds them equal.
  var MEASURED_ERROR = { parameters: 0.0, gradients: 0.0, optimizer_states: -0.029, activations: 4.307,
                         "parameters per rank": -0.596, "gradients per rank": -0.596, "optimizer_states per rank": -5.531,
                         configurations: 24, sharded_runs: 6 };

  /* ---- validation: the same rules as the Python module, errors name the argument ---- */
  function show(v) { return typeof v === "string" ? "'" + v + "'" : (v === null ? "None" : String(v)); }
  function choice(name, v, options) {
    if (typeof v !== "string" || options.indexOf(v) < 0) {
      throw new Error(name + " must be one of [" + options.map(show).join(", ") + "], got " + show(v));
    }
    return v;
  }
  function integer(name, v, min, max) {
    if (typeof v !== "number" || !Number.isInteger(v)) throw new TypeError(name + " must be an integer, got " + show(v));
    if (min !== undefined && v < min) throw new RangeError(name + " must be >= " + min + ", got " + v);
    if (max !== undefined && v > max) throw new RangeError(name + " must be <= " + max + ", got " + v);
    return v;
  }
  function exactKeys(name, obj, keys, optional) {
    if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw new TypeError(name + " must be a dict with keys " + keys.join(", ") + ", got " + show(obj));
    var missing = keys.filter(function (k) { return !(k in obj); });
    var extra = Object.keys(obj).filter(function (k) { return keys.indexOf(k) < 0 && k !== optional; });
    if (missing.length || extra.length) {
      throw new Error(name + " must have exactly the keys " + keys.join(", ") + "; missing [" + missing.join(", ") +
                      "], unexpected [" + extra.join(", ") + "] (got keys " + Object.keys(obj).join(", ") + ")");
    }
  }

  function validateArchitecture(arch, name) {
    name = name || "config['architecture']";
    exactKeys(name, arch, ARCH_KEYS);
    var style = choice(name + "['style']", arch.style, STYLES);
    var L = integer(name + "['num_layers']", arch.num_layers, 1, 1024);
    var h = integer(name + "['hidden_size']", arch.hidden_size, 1, 65536);
    var a = integer(name + "['num_heads']", arch.num_heads, 1, h);
    if (h % a) throw new RangeError(name + "['hidden_size'] must be divisible by " + name + "['num_heads'] (head size h/a), got hidden_size " + h + " and num_heads " + a);
    var k = integer(name + "['num_kv_heads']", arch.num_kv_heads, 1, a);
    if (a % k) throw new RangeError(name + "['num_heads'] must be divisible by " + name + "['num_kv_heads'] (query heads per key/value head in GQA), got num_heads " + a + " and num_kv_heads " + k);
    var f = integer(name + "['ffn_size']", arch.ffn_size, 1, 262144);
    var V = integer(name + "['vocab_size']", arch.vocab_size, 1, 1048576);
    if (typeof arch.tied_embeddings !== "boolean") throw new TypeError(name + "['tied_embeddings'] must be a bool, got " + show(arch.tied_embeddings));
    var P = arch.max_positions;
    if (style === "gpt2") P = integer(name + "['max_positions']", P, 1, 1048576);
    else if (P !== null) throw new RangeError(name + "['max_positions'] must be None for style 'llama' (RoPE has no position parameters), got " + show(P));
    return { style: style, num_layers: L, hidden_size: h, num_heads: a, num_kv_heads: k, ffn_size: f, vocab_size: V,
             tied_embeddings: arch.tied_embeddings, max_positions: P };
  }

  function validateConfig(c) {
    exactKeys("config", c, CONFIG_KEYS, "architecture");
    var model = choice("config['model']", c.model, MODELS), arch;
    if (model === "custom") {
      if (!("architecture" in c)) throw new Error("config['architecture'] is required when config['model'] is 'custom', got no such key");
      arch = validateArchitecture(c.architecture);
    } else {
      if (c.architecture !== undefined && c.architecture !== null) throw new Error("config['architecture'] must be absent or None for the preset '" + model + "' (use model 'custom')");
      arch = Object.assign({}, PRESETS[model]);
    }
    var s = integer("config['seq_len']", c.seq_len, 1, 131072);
    if (arch.style === "gpt2" && s > arch.max_positions) {
      throw new RangeError("config['seq_len'] must be <= max_positions (" + arch.max_positions + ": GPT-2 style learns one embedding per position), got " + s);
    }
    var out = { model: model, architecture: arch, seq_len: s,
                micro_batch_size: integer("config['micro_batch_size']", c.micro_batch_size, 1, 1024),
                grad_accum_steps: integer("config['grad_accum_steps']", c.grad_accum_steps, 1, 65536),
                num_workers: integer("config['num_workers']", c.num_workers, 1, MAX_WORKERS),
                precision: choice("config['precision']", c.precision, PRECISIONS),
                recompute: choice("config['recompute']", c.recompute, RECOMPUTE),
                zero_stage: integer("config['zero_stage']", c.zero_stage, 0, 3),
                device_gb: c.device_gb };
    if (typeof c.device_gb !== "number" || !isFinite(c.device_gb)) throw new TypeError("config['device_gb'] must be a real number, got " + show(c.device_gb));
    if (c.device_gb <= 0) throw new RangeError("config['device_gb'] must be > 0, got " + c.device_gb);
    return out;
  }

  /* ---- the formulas (same order of operations as the Python module) ---- */
  function parameterCount(arch) {
    var L = arch.num_layers, h = arch.hidden_size, a = arch.num_heads, k = arch.num_kv_heads, f = arch.ffn_size,
        V = arch.vocab_size, hkv = k * (h / a), gpt = arch.style === "gpt2";
    var attention = 2 * h * h + 2 * h * hkv + (gpt ? (2 * h + 2 * hkv) : 0);
    var mlp = gpt ? (2 * h * f + f + h) : 3 * h * f;
    var norms = gpt ? 4 * h : 2 * h;
    var layer = attention + mlp + norms;
    var embeddings = V * h * (arch.tied_embeddings ? 1 : 2);
    var positions = gpt ? arch.max_positions * h : 0;
    var finalNorm = gpt ? 2 * h : h;
    return L * layer + embeddings + positions + finalNorm;
  }

  function stateBytes(psi, precision, N, stage) {
    var by = PRECISION_BYTES[precision], x = psi;
    return { parameters: by[0] * x / (stage >= 3 ? N : 1),
             gradients: by[1] * x / (stage >= 2 ? N : 1),
             optimizer_states: by[2] * x / (stage >= 1 ? N : 1) };
  }

  function activationBytes(arch, seqLen, microBatch, precision, recompute, dropoutMasks) {
    var gpt = arch.style === "gpt2";
    var L = arch.num_layers, h = arch.hidden_size, a = arch.num_heads,
        hkv = arch.num_kv_heads * Math.floor(arch.hidden_size / arch.num_heads),
        f = arch.ffn_size, V = arch.vocab_size, s = seqLen, t = s * microBatch;
    var e = PRECISION_BYTES[precision][3], m = PRECISION_BYTES[precision][4], ab = AUTOCAST_BYTES[precision];
    var r = ab[0], qkvReads = ab[1], mlpReads = ab[2], w = ab[3], drop = gpt ? 1 : 0;
    var d = dropoutMasks === "dtype" ? e : 1, dEmbed = dropoutMasks === "dtype" ? r : 1;
    var ln1 = t * h * r;
    var mlpIn = t * h * m * (gpt ? 1 : mlpReads);
    var mlpHidden = gpt ? (t * f * e + t * f * m) : (t * f * e + t * f * e + t * f * m);
    var linear = ln1 + t * h * m * qkvReads + t * h * e + t * hkv * e + t * hkv * e + t * h * m + t * h * d * drop +
                 t * h * r + mlpIn + mlpHidden + t * h * d * drop;
    var layerWeights = h * h * 2 + h * hkv * 2 + h * f * (gpt ? 2 : 3);
    var copies = layerWeights * w;
    var scores = a * s * t;
    var scoreTerms = scores * e + scores * d * drop + scores * e * drop + s * s;
    var none = linear + scoreTerms + copies, perLayer, transient;
    if (recompute === "none") { perLayer = none; transient = 0; }
    else if (recompute === "selective") { perLayer = linear + copies; transient = scoreTerms + (t * h * e + t * hkv * e * 2); }
    else { perLayer = ln1; transient = none - ln1; }
    var layers = L * perLayer;
    var outside = t * h * dEmbed * drop + t * h * r + t * h * m + t * V * 4 + V * h * w;
    return { per_layer_none: none, per_layer: perLayer, layers: layers, outside: outside,
             recompute_peak: transient, total: layers + outside + transient };
  }

  function divisorsDescending(n) { var out = [], d; for (d = n; d >= 1; d--) if (n % d === 0) out.push(d); return out; }

  function search(c, psi, budget) {
    var arch = c.architecture, stages = [], recs = RECOMPUTE.slice(RECOMPUTE.indexOf(c.recompute)),
        mbs = divisorsDescending(c.micro_batch_size), workers = [], n, z, i, j, k, w;
    for (z = c.zero_stage; z <= 3; z++) stages.push(z);
    for (n = c.num_workers; n <= MAX_WORKERS; n *= 2) workers.push(n);
    var states = stages.map(function (zz) { return workers.map(function (ww) { return stateBytes(psi, c.precision, ww, zz); }); });
    var acts = recs.map(function (r) { return mbs.map(function (mb) { return activationBytes(arch, c.seq_len, mb, c.precision, r).total; }); });
    var best = null;
    for (i = 0; i < stages.length; i++) {
      for (j = 0; j < recs.length; j++) {
        for (k = 0; k < mbs.length; k++) {
          for (w = 0; w < workers.length; w++) {
            if (w > 0 && stages[i] === 0) break;
            var steps = i + j + k + w;
            if (steps === 0 || (best !== null && steps > best[0])) continue;
            var st = states[i][w];
            var total = st.parameters + st.gradients + st.optimizer_states + acts[j][k];
            if (total <= budget && (best === null || steps < best[0] || total < best[1])) best = [steps, total, i, j, k, w];
          }
        }
      }
    }
    if (best === null) return null;
    var b = c.micro_batch_size, A = c.grad_accum_steps, N = c.num_workers, nb = mbs[best[4]], nN = workers[best[5]];
    var G = b * A * N;
    var nA = G % (nb * nN) === 0 ? G / (nb * nN) : A * (b / nb);
    var fresh = { zero_stage: stages[best[2]], recompute: recs[best[3]], micro_batch_size: nb, grad_accum_steps: nA,
                  num_workers: nN };
    var changes = [];
    ["zero_stage", "recompute", "micro_batch_size", "grad_accum_steps", "num_workers"].forEach(function (key) {
      if (fresh[key] !== c[key]) changes.push([key, c[key], fresh[key]]);
    });
    var config = { model: c.model };
    if (c.model === "custom") config.architecture = Object.assign({}, arch);
    CONFIG_KEYS.forEach(function (key) { if (key !== "model") config[key] = key in fresh ? fresh[key] : c[key]; });
    return { steps: best[0], changes: changes, config: config, total: best[1], global_batch: nb * nA * nN };
  }

  function transformerMemory(config, dropoutMasks) {
    var c = validateConfig(config);
    dropoutMasks = dropoutMasks === undefined ? "bool" : choice("dropout_masks", dropoutMasks, DROPOUT_MASKS);
    var psi = parameterCount(c.architecture);
    var st = stateBytes(psi, c.precision, c.num_workers, c.zero_stage);
    var act = activationBytes(c.architecture, c.seq_len, c.micro_batch_size, c.precision, c.recompute, dropoutMasks);
    var total = st.parameters + st.gradients + st.optimizer_states + act.total;
    var budget = c.device_gb * GB, fits = total <= budget;
    var suggestion = fits ? null : search(c, psi, budget);
    var globalBatch = c.micro_batch_size * c.grad_accum_steps * c.num_workers;
    return { num_parameters: psi, parameters: st.parameters, gradients: st.gradients,
             optimizer_states: st.optimizer_states, activations: act.total, total: total,
             activations_per_layer: act.per_layer, activations_layers: act.layers,
             activations_outside_layers: act.outside, activations_recompute_peak: act.recompute_peak,
             global_batch: globalBatch, tokens_per_step: globalBatch * c.seq_len, budget_bytes: budget,
             fits: fits, suggestion_status: fits ? "not needed" : (suggestion !== null ? "found" : "none fits"),
             suggestion: suggestion };
  }

  /* ---- the page: a preset or custom architecture, the training setup, a stacked bar against the budget ---- */
  var LABELS = { "gpt2-small": "GPT-2 small (124M)", "llama-3-8b": "Llama-3-8B", "llama-3-70b": "Llama-3-70B",
                 custom: "custom", fp32: "fp32", mixed_fp16: "mixed fp16", mixed_bf16: "mixed bf16",
                 fp8: "fp8 (bf16 weights, fp32 master)",
                 autocast_bf16: "autocast bf16 (fp32 weights)", none: "none", selective: "selective", full: "full",
                 zero_stage: "ZeRO stage", recompute: "recomputation", micro_batch_size: "micro-batch",
                 grad_accum_steps: "accumulation steps", num_workers: "workers" };
  var SLIDERS = [
    ["seq_len", "sequence length", [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768], 1024],
    ["micro_batch_size", "micro-batch b", [1, 2, 4, 8, 16, 32, 64], 8],
    ["grad_accum_steps", "accumulation steps A", [1, 2, 4, 8, 16, 32, 64, 128], 4],
    ["num_workers", "workers N", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], 8],
    ["device_gb", "device budget (GB)", [24, 40, 80, 141], 80]
  ];
  var SELECTS = [
    ["precision", "precision", PRECISIONS, "mixed_bf16"],
    ["recompute", "recomputation", RECOMPUTE, "none"],
    ["zero_stage", "ZeRO stage", [0, 1, 2, 3], 1]
  ];
  var FIELDS = [["num_layers", "layers"], ["hidden_size", "hidden size"], ["num_heads", "heads"],
                ["num_kv_heads", "KV heads (GQA)"], ["ffn_size", "FFN size"], ["vocab_size", "vocabulary"],
                ["max_positions", "learned positions"]];
  var PARTS = [["parameters", "#4e79a7"], ["gradients", "#f28e2b"], ["optimizer_states", "#e15759"],
               ["activations", "#76b7b2"]];

  function pct(x) { return (x >= 0 ? "+" : "") + x.toFixed(1) + "%"; }
  function gb(x) { return (x / GB).toFixed(2) + " GB"; }
  function count(n) { return n >= 1e9 ? (n / 1e9).toFixed(2) + " B" : (n / 1e6).toFixed(1) + " M"; }
  function label(v) { return LABELS[v] !== undefined ? LABELS[v] : String(v); }
  function describeChange(ch) { return label(ch[0]) + " " + label(ch[1]) + " \u2192 " + label(ch[2]); }

  function element(tag, attrs, text) {
    var el = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function mount(el) {
    var state = { model: "llama-3-8b" }, arch = Object.assign({}, PRESETS["llama-3-8b"]);
    var form = element("div", { "class": "tsx-controls" }), custom = element("div", { "class": "tsx-controls" });
    var out = element("div");

    var modelLabel = element("label", {}, "model "), model = element("select", { "data-control": "model" });
    MODELS.forEach(function (m) { var o = element("option", { value: m }, label(m)); model.appendChild(o); });
    model.value = state.model;
    modelLabel.appendChild(model); form.appendChild(modelLabel);
    SELECTS.forEach(function (spec) {
      var lab = element("label", {}, spec[1] + " "), sel = element("select", { "data-control": spec[0] });
      spec[2].forEach(function (v) { sel.appendChild(element("option", { value: String(v) }, label(v))); });
      sel.value = String(spec[3]); state[spec[0]] = spec[3];
      sel.addEventListener("change", function () { state[spec[0]] = typeof spec[3] === "number" ? +sel.value : sel.value; render(); });
      lab.appendChild(sel); form.appendChild(lab);
    });
    SLIDERS.forEach(function (spec) {
      var options = spec[2], lab = element("label", {}, spec[1] + " "), value = element("span", { "class": "tsx-value" });
      var input = element("input", { type: "range", min: 0, max: options.length - 1, step: 1, "data-control": spec[0] });
      input.value = options.indexOf(spec[3]); state[spec[0]] = spec[3]; value.textContent = String(spec[3]);
      input.addEventListener("input", function () { state[spec[0]] = options[+input.value]; value.textContent = String(state[spec[0]]); render(); });
      lab.appendChild(input); lab.appendChild(value); form.appendChild(lab);
    });

    var inputs = {};
    var styleLabel = element("label", {}, "style "), style = element("select", { "data-control": "style" });
    style.appendChild(element("option", { value: "gpt2" }, "GPT-2 (LayerNorm, biases, GELU, learned positions)"));
    style.appendChild(element("option", { value: "llama" }, "Llama (RMSNorm, no biases, SwiGLU, RoPE)"));
    styleLabel.appendChild(style); custom.appendChild(styleLabel); inputs.style = style;
    FIELDS.forEach(function (spec) {
      var lab = element("label", {}, spec[1] + " "), input = element("input", { type: "number", min: 1, step: 1, "data-control": spec[0] });
      lab.appendChild(input); custom.appendChild(lab); inputs[spec[0]] = input;
    });
    var tiedLabel = element("label", {}, "tied embeddings "), tied = element("input", { type: "checkbox", "data-control": "tied_embeddings" });
    tiedLabel.appendChild(tied); custom.appendChild(tiedLabel); inputs.tied_embeddings = tied;

    function fill() {
      Object.keys(inputs).forEach(function (k) {
        var input = inputs[k];
        if (k === "tied_embeddings") input.checked = arch[k];
        else input.value = arch[k] === null ? "" : String(arch[k]);
        input.disabled = state.model !== "custom" || (k === "max_positions" && arch.style !== "gpt2");
      });
    }
    function readCustom() {
      arch.style = style.value;
      FIELDS.forEach(function (spec) {
        var raw = inputs[spec[0]].value;
        arch[spec[0]] = raw === "" ? null : Number(raw);
      });
      if (arch.style === "gpt2" && arch.max_positions === null) arch.max_positions = 1024;
      if (arch.style !== "gpt2") arch.max_positions = null;
      arch.tied_embeddings = tied.checked;
    }
    model.addEventListener("change", function () {
      state.model = model.value;
      if (state.model !== "custom") arch = Object.assign({}, PRESETS[state.model]);
      fill(); render();
    });
    Object.keys(inputs).forEach(function (k) {
      inputs[k].addEventListener(k === "style" || k === "tied_embeddings" ? "change" : "input", function () {
        readCustom(); fill(); render();
      });
    });

    el.appendChild(form);
    el.appendChild(element("p", { "class": "tsx-caption" }, "architecture (editable when the model is \u201ccustom\u201d):"));
    el.appendChild(custom); el.appendChild(out);

    function bar(r, scale, y, title) {
      var x = 0, svg = [];
      PARTS.forEach(function (p) {
        var w = scale * r[p[0]];
        svg.push('<rect x="' + x.toFixed(2) + '" y="' + y + '" width="' + w.toFixed(2) + '" height="26" fill="' + p[1] +
                 '"><title>' + p[0].replace("_", " ") + " " + gb(r[p[0]]) + "</title></rect>");
        x += w;
      });
      svg.push('<text x="' + (x + 4).toFixed(2) + '" y="' + (y + 18) + '" font-size="12">' + title + "</text>");
      return svg.join("");
    }

    function render() {
      var config = {}, r;
      CONFIG_KEYS.forEach(function (k) { config[k] = state[k]; });
      if (state.model === "custom") config.architecture = Object.assign({}, arch);
      try { r = transformerMemory(config); }
      catch (err) { out.innerHTML = ""; out.appendChild(element("p", { "class": "tsx-error", "data-quantity": "error" }, String(err.message))); return; }
      var after = r.suggestion !== null ? transformerMemory(r.suggestion.config) : null;
      var height = after ? 84 : 46, scale = 520 / Math.max(r.total, r.budget_bytes);
      var parts = [bar(r, scale, 4, "now " + gb(r.total))];
      if (after) parts.push(bar(after, scale, 40, "after the change " + gb(after.total)));
      var bx = (scale * r.budget_bytes).toFixed(2);
      parts.push('<line x1="' + bx + '" x2="' + bx + '" y1="0" y2="' + height + '" stroke="#b00" stroke-width="2" stroke-dasharray="4 2"><title>budget ' + gb(r.budget_bytes) + "</title></line>");
      var svg = '<svg width="760" height="' + height + '" role="img" aria-label="bytes per worker against the device budget">' + parts.join("") + "</svg>";
      var rows = PARTS.map(function (p) {
        return '<tr><td><span style="color:' + p[1] + '">&#9632;</span> ' + p[0].replace("_", " ") +
               '</td><td class="tsx-num" data-quantity="' + p[0] + '">' + gb(r[p[0]]) + '</td><td class="tsx-err" data-quantity="error_' +
               p[0] + '">measured: ' + pct(MEASURED_ERROR[p[0]]) + "</td></tr>";
      }).join("");
      var verdict = r.fits ? "fits" : "does not fit";
      var advice;
      if (r.suggestion_status === "not needed") advice = "no change needed";
      else if (r.suggestion_status === "none fits") advice = "no combination of ZeRO-3, full recomputation, micro-batch 1 and up to " + MAX_WORKERS + " workers fits: a bigger device, tensor/pipeline parallelism or a smaller model";
      else advice = r.suggestion.changes.map(describeChange).join("; ") + " (" + r.suggestion.steps + " step" + (r.suggestion.steps > 1 ? "s" : "") +
                    ", global batch " + r.global_batch + " \u2192 " + r.suggestion.global_batch + " sequences) \u2192 " + gb(r.suggestion.total);
      out.innerHTML = svg + '<table class="tsx-table">' +
        '<tr><td>parameters \u03a8</td><td class="tsx-num" data-quantity="num_parameters">' + count(r.num_parameters) + "</td></tr>" + rows +
        '<tr><th>total per worker</th><th class="tsx-num" data-quantity="total">' + gb(r.total) + "</th></tr>" +
        '<tr><td>device budget</td><td class="tsx-num" data-quantity="budget_bytes">' + gb(r.budget_bytes) + "</td></tr>" +
        '<tr><th>verdict</th><th class="tsx-num" data-quantity="fits">' + verdict + "</th></tr>" +
        '<tr><td>smallest change</td><td data-quantity="suggestion">' + advice + "</td></tr>" +
        '<tr><td>activations: per layer stored</td><td class="tsx-num" data-quantity="activations_per_layer">' + gb(r.activations_per_layer) + "</td></tr>" +
        '<tr><td>activations: outside the layers (incl. fp32 logits)</td><td class="tsx-num" data-quantity="activations_outside_layers">' + gb(r.activations_outside_layers) + "</td></tr>" +
        '<tr><td>activations: one layer rebuilt in backward</td><td class="tsx-num" data-quantity="activations_recompute_peak">' + gb(r.activations_recompute_peak) + "</td></tr>" +
        '<tr><td colspan="3" data-quantity="measured_note">Measured on the course\u2019s GPT (' + MEASURED_ERROR.configurations +
        " configurations, record memory-gpt), largest error: parameters " + pct(MEASURED_ERROR.parameters) + ", gradients " +
        pct(MEASURED_ERROR.gradients) + ", optimizer state " + pct(MEASURED_ERROR.optimizer_states) + ", activations " +
        pct(MEASURED_ERROR.activations) + "; per rank under ZeRO-1/FSDP2 (" + MEASURED_ERROR.sharded_runs + " runs) optimizer state " +
        pct(MEASURED_ERROR["optimizer_states per rank"]) + ".</td></tr>" +
        '<tr><td>global batch</td><td class="tsx-num" data-quantity="global_batch">' + r.global_batch + " sequences, " + r.tokens_per_step + " tokens</td></tr></table>";
    }
    fill();
    render();
  }

  var api = { PRESETS: PRESETS, MEASURED_ERROR: MEASURED_ERROR, PRECISIONS: PRECISIONS, RECOMPUTE: RECOMPUTE, validateConfig: validateConfig,
              parameterCount: parameterCount, stateBytes: stateBytes, activationBytes: activationBytes,
              transformerMemory: transformerMemory, mount: mount };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  root.TrainsysTransformerMemory = api;
  if (typeof document !== "undefined") {
    document.addEventListener("DOMContentLoaded", function () {
      Array.prototype.forEach.call(document.querySelectorAll("[data-trainsys-transformer-explorer]"), mount);
    });
  }
})(typeof window !== "undefined" ? window : globalThis);
