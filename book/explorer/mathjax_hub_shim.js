/*
 * The ipywidgets embed manager (html-manager 1.x) typesets widget output with MathJax 2's
 * MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); this book serves MathJax 3, which has no Hub.
 * When MathJax 3 installs its global object, give it a small Hub whose Queue forwards to
 * MathJax.typesetPromise — so widget pages typeset instead of throwing. Loaded before MathJax.
 */
(function () {
  "use strict";
  function addHub(mj) {
    if (!mj || typeof mj !== "object" || mj.Hub) return;
    mj.Hub = {
      Queue: function () {
        for (var i = 0; i < arguments.length; i++) {
          var job = arguments[i];
          if (Array.isArray(job) && job[0] === "Typeset" && typeof mj.typesetPromise === "function") {
            mj.typesetPromise(job[2] ? [job[2]] : undefined).catch(function () {});
          } else if (typeof job === "function") {
            job();
          }
        }
      }
    };
  }
  var current = window.MathJax;
  addHub(current);
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    enumerable: true,
    get: function () { return current; },
    set: function (value) { current = value; addHub(value); }
  });
})();
