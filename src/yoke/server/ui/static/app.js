// The dashboard's own script: live regions over one event stream per browser, and charts.
// No inline script anywhere (the Content-Security-Policy forbids it); htmx does the fetching.
(function () {
  "use strict";
  var badge = document.getElementById("live");
  var behind = false;  // a signal came while this tab was hidden: refresh once it shows

  function state(text) {
    if (badge) { badge.textContent = text; badge.setAttribute("data-state", text); }
  }

  function changed() {
    if (window.htmx) { window.htmx.trigger(document.body, "yoke:changed"); }
    charts.schedule();
  }

  function seen(v) {
    if (v === null || v === undefined || String(v) === document.body.getAttribute("data-version")) {
      return;
    }
    document.body.setAttribute("data-version", String(v));
    if (document.visibilityState === "visible") { changed(); } else { behind = true; }
  }

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && behind) { behind = false; changed(); }
  });

  // One stream for all the tabs of a browser: a browser keeps six connections to a server,
  // so a stream per tab would leave the seventh tab unable to load. The SharedWorker
  // (stream.js) holds it and tells every tab; a tab says goodbye when it goes.
  function shared() {
    if (!window.SharedWorker) { return false; }
    var worker;
    try {
      worker = new SharedWorker("/ui/static/stream.js", { name: "yoke-events" });
    } catch (e) {
      return false;
    }
    var port = worker.port;
    port.onmessage = function (m) {
      if (m.data.state) { state(m.data.state); }
      seen(m.data.v);
    };
    worker.addEventListener("error", function () { own(); });  // the worker could not start
    window.addEventListener("pagehide", function () { port.postMessage("bye"); });
    window.addEventListener("pageshow", function (e) { if (e.persisted) { port.postMessage("hello"); } });
    return true;
  }

  // Without a SharedWorker, each visible tab holds its own stream and a hidden tab lets it go
  // (so hidden tabs leave the browser's connections to the visible ones).
  var source = null;
  var retry = null;
  var owned = false;

  function open() {
    if (source || document.visibilityState !== "visible") { return; }
    source = new EventSource("/ui/events");
    state("connecting");
    source.addEventListener("open", function () { state("live"); });
    source.addEventListener("changed", function (event) {
      seen(JSON.parse(event.data).v);
      state("live");
    });
    source.addEventListener("error", function () {
      if (source && source.readyState === EventSource.CLOSED) {
        source = null;
        state("offline");
        retry = setTimeout(open, 3000);
      } else {
        state("reconnecting");
      }
    });
  }

  function close() {
    if (retry) { clearTimeout(retry); retry = null; }
    if (source) { source.close(); source = null; }
    state("paused");
  }

  function own() {
    if (owned) { return; }
    owned = true;
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "visible") { open(); changed(); } else { close(); }
    });
    window.addEventListener("pagehide", close);
    open();
  }

  function start() {
    if (!shared()) { own(); }
    charts.draw();
  }

  // -- charts: uPlot over the /v1/series twin, redrawn at most once a second --------------
  var COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#9b2c2c", "#6b46c1", "#b7791f"];
  // A session's colour comes from its name alone (FNV-1a, mixed so that short names spread,
  // then a hue and one of two lightnesses), so it keeps it from one chart, view and second to
  // the next, whatever its rank.
  function colourOf(name) {
    var h = 2166136261;
    for (var i = 0; i < name.length; i++) {
      h ^= name.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    h >>>= 0;
    return "hsl(" + (h % 360) + ", 70%, " + ((h >>> 9) % 2 ? 36 : 48) + "%)";
  }
  var charts = {
    plots: [],
    pending: null,
    last: 0,
    schedule: function () {
      if (!window.uPlot || charts.pending) { return; }
      var wait = Math.max(0, 1000 - (Date.now() - charts.last));
      charts.pending = setTimeout(function () { charts.pending = null; charts.draw(); }, wait);
    },
    draw: function () {
      charts.last = Date.now();
      var nodes = document.querySelectorAll(".chart[data-src]");
      nodes.forEach(function (node) {
        fetch(node.getAttribute("data-src"), { credentials: "same-origin", headers: { "Accept": "application/json" } })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (data) { if (data) { charts.plot(node, data); } })
          .catch(function () { /* the next signal retries */ });
      });
    },
    plot: function (node, data) {
      var kind = node.getAttribute("data-chart");
      var series = [{}];
      var columns = [data.t];
      if (kind === "starts") {
        series.push({ label: "starts/s", stroke: COLORS[0], width: 2 });
        columns.push(data.starts);
        if (data.refused) { series.push({ label: "refused/s", stroke: COLORS[3], width: 2 }); columns.push(data.refused); }
      } else if (kind === "jain") {
        series.push({ label: "Jain", stroke: COLORS[2], width: 2, spanGaps: true });
        columns.push(data.jain || data.t.map(function () { return null; }));
      } else {
        data.sessions.forEach(function (name) {
          series.push({ label: name, stroke: colourOf(name), width: 2, spanGaps: true });
          columns.push(data.waits[name]);
        });
        if (data.sessions.length === 0) { series.push({ label: "no grants yet", stroke: COLORS[5], width: 1 }); columns.push(data.t.map(function () { return 0; })); }
      }
      var width = Math.max(280, node.clientWidth || 600);
      // Redrawn in place only for the same series: a session that joins, leaves or changes
      // rank makes a new plot, so that no line keeps another session's label or colour.
      var key = kind + ":" + series.map(function (x) { return x.label || ""; }).join("\u0000");
      var old = node._plot;
      if (old && old._key === key) { old.setData(columns); return; }
      if (old) { old.destroy(); }
      // One line per time label (uPlot's default stacks the date under the first one, which
      // overlaps its neighbour): hh:mm, with seconds when ticks are under a minute apart.
      var clock = function (u, splits, axis, space, incr) {
        return splits.map(function (t) {
          var d = new Date(t * 1000);
          var hm = String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
          return incr < 60 ? hm + ":" + String(d.getSeconds()).padStart(2, "0") : hm;
        });
      };
      var opts = { width: width, height: 200, series: series, axes: [{ stroke: "#888", space: 70, values: clock }, { stroke: "#888" }], legend: { live: false } };
      node._plot = new window.uPlot(opts, columns, node);
      node._plot._key = key;
    }
  };

  var started = false;
  function once() { if (!started) { started = true; start(); } }
  document.addEventListener("DOMContentLoaded", once);
  if (document.readyState !== "loading") { once(); }
})();
