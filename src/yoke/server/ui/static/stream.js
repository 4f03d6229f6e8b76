// The dashboard's event stream, shared by every tab of one browser (a SharedWorker).
//
// A browser keeps at most six connections to one server over HTTP/1.1, and an event stream
// holds one for as long as it is open: with a stream per tab, the seventh tab's page never
// loads. Here one stream serves them all. Each tab (app.js) connects a port; the worker opens
// /ui/events while at least one port is connected, tells every port the stream's state
// ("connecting", "live", "reconnecting", "offline") and each "changed" version, and closes the
// stream when the last tab has said goodbye. A tab that connects late gets the last state and
// version at once. The worker only relays: it renders nothing and keeps no data of its own.
"use strict";

var ports = [];
var source = null;
var retry = null;
var last = { state: "connecting", v: null };

function tell(message) {
  if (message.state) { last.state = message.state; }
  if (message.v !== undefined && message.v !== null) { last.v = message.v; }
  ports.forEach(function (port) { port.postMessage(message); });
}

function open() {
  if (source || retry || !ports.length) { return; }
  source = new EventSource("/ui/events");
  tell({ state: "connecting" });
  source.addEventListener("open", function () { tell({ state: "live" }); });
  source.addEventListener("changed", function (event) {
    tell({ state: "live", v: JSON.parse(event.data).v });
  });
  source.addEventListener("error", function () {
    if (source && source.readyState === EventSource.CLOSED) {
      source = null;
      tell({ state: "offline" });
      retry = setTimeout(function () { retry = null; open(); }, 3000);
    } else {
      tell({ state: "reconnecting" });
    }
  });
}

function close() {
  if (retry) { clearTimeout(retry); retry = null; }
  if (source) { source.close(); source = null; }
  last = { state: "connecting", v: null };
}

self.addEventListener("connect", function (event) {
  var port = event.ports[0];
  port.addEventListener("message", function (m) {
    if (m.data === "bye") {
      ports = ports.filter(function (p) { return p !== port; });
      if (!ports.length) { close(); }
    } else if (m.data === "hello" && ports.indexOf(port) < 0) {  // back from the page cache
      ports.push(port);
      port.postMessage(last);
      open();
    }
  });
  port.start();
  ports.push(port);
  port.postMessage(last);
  open();
});
