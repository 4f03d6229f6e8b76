// The dashboard's own script: one event stream per visible tab, live regions, charts.
// No inline script anywhere (the Content-Security-Policy forbids it); htmx does the fetching.
(function () {
  "use strict";
  var badge = document.getElementById("live");
  var source = null;
  var retry = null;

  function state(text) {
    if (badge) { badge.textContent = text; badge.setAttribute("data-state", text); }
  }

  function changed() {
    if (window.htmx) { window.htmx.trigger(document.body, "yoke:changed"); }
    charts.schedule();
  }

  function open() {
    if (source || document.visibilityState !== "visible") { return; }
    source = new EventSource("/ui/events");
    state("connecting");
    source.addEventListener("open", function () { state("live"); });
    source.addEventListener("changed", function (event) {
      var v = JSON.parse(event.data).v;
      if (String(v) !== document.body.getAttribute("data-version")) {
        document.body.setAttribute("data-version", String(v));
        changed();
      }
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

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") { open(); changed(); } else { close(); }
  });
  window.addEventListener("pagehide", close);

  // -- charts: uPlot over the /v1/series twin, redrawn at most once a second --------------
  var COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#9b2c2c", "#6b46c1", "#b7791f"];
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
        data.sessions.forEach(function (name, i) {
          series.push({ label: name, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true });
          columns.push(data.waits[name]);
        });
        if (data.sessions.length === 0) { series.push({ label: "no grants yet", stroke: COLORS[5], width: 1 }); columns.push(data.t.map(function () { return 0; })); }
      }
      var width = Math.max(280, node.clientWidth || 600);
      var key = kind + ":" + (series.length);
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

  document.addEventListener("DOMContentLoaded", function () { open(); charts.draw(); });
  if (document.readyState !== "loading") { open(); charts.draw(); }
})();
