/*
 * The memory explorer, without a kernel: the same formulas as trainsys.memtrain.memory (Python), in the
 * same order of operations, so that both give identical numbers (tests/test_explorer_parity.py runs this
 * file in node on a grid of configurations). Sources: ZeRO (Rajbhandari et al. 2020) for parameters,
 * gradients and optimizer state; the activation timeline of trainsys.memtrain.checkpointing for the peak.
 */
(function (root) {
  "use strict";
  var BUFSIZE = 8192; // numpy.getbufsize(): the buffer NumPy casts a boolean mask through

  function optimizerMemoryBytes(psi, precision, N, stage) {
    var p = precision === "mixed" ? 2 : 4, g = precision === "mixed" ? 2 : 4, k = precision === "mixed" ? 12 : 8;
    var parameters = p * psi / (stage >= 3 ? N : 1);
    var gradients = g * psi / (stage >= 2 ? N : 1);
    var states = k * psi / (stage >= 1 ? N : 1);
    return { parameters: parameters, gradients: gradients, optimizer_states: states,
             total: parameters + gradients + states };
  }

  function activationTimeline(widths, n, segmentSize, b) {
    var L = widths.length - 1, plain = segmentSize === null, bounds = [], k, l;
    if (plain) { bounds.push([0, L]); }
    else { for (k = 0; k < Math.ceil(L / segmentSize); k++) bounds.push([k * segmentSize, Math.min((k + 1) * segmentSize, L)]); }
    var act = widths.map(function (w) { return n * w * b; });
    var mask = widths.map(function (w) { return n * w + b * Math.min(BUFSIZE, n * w); });
    var timeline = [], kept = 0;
    for (l = 0; l < L - 1; l++) {
      timeline.push(kept + 2 * act[l + 1]);
      if (plain || (l + 1) % bounds[0][1] === 0) kept += act[l + 1];
    }
    timeline.push(kept + act[L]);
    var stored = kept, dY = act[L], gSegment = 0;
    for (k = bounds.length - 1; k >= 0; k--) {
      var start = bounds[k][0], stop = bounds[k][1], rebuilt = 0, gLayer = 0;
      if (!plain) {
        for (l = start; l < stop - 1; l++) { timeline.push(stored + rebuilt + 2 * act[l + 1] + dY + gSegment); rebuilt += act[l + 1]; }
      }
      for (l = stop - 1; l >= start; l--) {
        var base = stored + rebuilt + dY + gSegment + gLayer;
        if (l === 0) { timeline.push(base); break; }
        timeline.push(base + act[l] + mask[l] + act[l]);
        gLayer = act[l];
      }
      gSegment = gLayer;
    }
    return timeline;
  }

  function exploreMemory(c) {
    var widths = [], i;
    for (i = 0; i <= c.depth; i++) widths.push(c.width);
    var psi = 0;
    for (i = 0; i < widths.length - 1; i++) psi += widths[i] * widths[i + 1] + widths[i + 1];
    var opt = optimizerMemoryBytes(psi, c.precision, c.num_workers, c.zero_stage);
    var perWorker = Math.ceil(c.batch / c.num_workers);
    var rows = Math.ceil(perWorker / c.num_micro_batches);
    var b = c.precision === "mixed" ? 2 : 4;
    var acts = Math.max.apply(null, activationTimeline(widths, rows, c.segment_size, b));
    var total = 0 + opt.parameters + opt.gradients + opt.optimizer_states + acts;
    var itemsize = c.precision === "mixed" ? 2 : 4;
    var recomputed = c.segment_size === null ? 0 : c.depth - Math.ceil(c.depth / c.segment_size);
    return { parameters: opt.parameters, gradients: opt.gradients, optimizer_states: opt.optimizer_states,
             activations: acts, total: total,
             // stages 2-3 reduce-scatter the sharded gradient after every micro-batch (memory.py's twin)
             communication_bytes: itemsize * psi * [2, 2, c.num_micro_batches + 1, 3 * c.num_micro_batches][c.zero_stage] *
               (c.num_workers - 1) / c.num_workers,
             recompute_fraction: recomputed / (3 * c.depth) };
  }

  /* ---- the page: sliders, a stacked bar, the numbers ---- */
  var CONTROLS = [
    ["precision", "precision", ["fp32", "mixed"], "mixed"],
    ["num_workers", "workers N", [1, 2, 4, 8, 16, 64], 4],
    ["zero_stage", "ZeRO stage", [0, 1, 2, 3], 1],
    ["num_micro_batches", "micro-batches M", [1, 2, 4, 8, 16], 2],
    ["segment_size", "checkpoint segment s", [null, 1, 2, 3, 4, 6, 8, 12, 16], 4],
    ["width", "width", [256, 512, 1024, 2048, 4096], 1024],
    ["depth", "depth (layers)", [4, 8, 16, 24, 32], 16],
    ["batch", "batch", [64, 256, 1024, 4096], 1024]
  ];
  var PARTS = [["parameters", "#4e79a7"], ["gradients", "#f28e2b"], ["optimizer_states", "#e15759"], ["activations", "#76b7b2"]];

  function mib(x) { return (x / 1048576).toFixed(2) + " MiB"; }

  function mount(el) {
    var state = {}, form = document.createElement("div"), out = document.createElement("div");
    form.className = "tsx-controls";
    CONTROLS.forEach(function (spec) {
      var name = spec[0], options = spec[2], label = document.createElement("label"), input = document.createElement("input");
      state[name] = spec[3];
      input.type = "range"; input.min = 0; input.max = options.length - 1; input.step = 1;
      input.value = options.indexOf(spec[3]); input.name = name; input.setAttribute("data-control", name);
      var value = document.createElement("span");
      value.className = "tsx-value";
      function show() { var v = options[+input.value]; value.textContent = v === null ? "off" : String(v); }
      input.addEventListener("input", function () {
        state[name] = options[+input.value]; show(); render();
      });
      show();
      label.textContent = spec[1] + " ";
      label.appendChild(input); label.appendChild(value);
      form.appendChild(label);
    });
    el.appendChild(form); el.appendChild(out);

    function render() {
      var c = {}; Object.keys(state).forEach(function (k) { c[k] = state[k]; });
      if (c.segment_size !== null && c.segment_size > c.depth) c.segment_size = c.depth;
      c.num_micro_batches = Math.min(c.num_micro_batches, Math.ceil(c.batch / c.num_workers));
      var r = exploreMemory(c), widthPx = 560, x = 0, svg = ['<svg width="' + (widthPx + 10) + '" height="46" role="img">'];
      PARTS.forEach(function (p) {
        var w = widthPx * r[p[0]] / r.total;
        svg.push('<rect x="' + x + '" y="4" width="' + w + '" height="30" fill="' + p[1] + '"><title>' + p[0] + "</title></rect>");
        x += w;
      });
      svg.push("</svg>");
      var rows = PARTS.map(function (p) {
        return '<tr><td><span style="color:' + p[1] + '">&#9632;</span> ' + p[0].replace("_", " ") +
               '</td><td class="tsx-num" data-quantity="' + p[0] + '">' + mib(r[p[0]]) + "</td></tr>";
      }).join("");
      out.innerHTML = svg.join("") + '<table class="tsx-table">' + rows +
        '<tr><th>total per worker</th><th class="tsx-num" data-quantity="total">' + mib(r.total) + "</th></tr>" +
        '<tr><td>sent per worker per step</td><td class="tsx-num" data-quantity="communication_bytes">' + mib(r.communication_bytes) + "</td></tr>" +
        '<tr><td>recompute overhead</td><td class="tsx-num" data-quantity="recompute_fraction">' + (100 * r.recompute_fraction).toFixed(1) + " %</td></tr></table>";
    }
    render();
  }

  var api = { optimizerMemoryBytes: optimizerMemoryBytes, activationTimeline: activationTimeline,
              exploreMemory: exploreMemory, mount: mount, CONTROLS: CONTROLS };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  root.TrainsysMemory = api;
  if (typeof document !== "undefined") {
    document.addEventListener("DOMContentLoaded", function () {
      Array.prototype.forEach.call(document.querySelectorAll("[data-trainsys-memory-explorer]"), mount);
    });
  }
})(typeof window !== "undefined" ? window : globalThis);
