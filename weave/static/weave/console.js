// Weave's auto-reload: off unless the page asks for it (data-weave-refresh on the element with
// id weave-refresh). It waits while a person is using the page (focus in a field, a link or button
// focused, text selected) and brings the scroll position and the focused element back after the reload.
(function () {
  "use strict";
  var KEY = "weave-refresh:" + location.pathname + location.search;
  function restore() {
    var saved = null;
    try { saved = JSON.parse(sessionStorage.getItem(KEY) || "null"); } catch (e) { saved = null; }
    sessionStorage.removeItem(KEY);
    if (!saved) { return; }
    window.scrollTo(0, saved.y || 0);
    if (saved.focus) {
      var el = document.getElementById(saved.focus);
      if (el) { el.focus({ preventScroll: true }); }
    }
  }
  function busy() {
    var el = document.activeElement;
    var selected = window.getSelection && String(window.getSelection()).length > 0;
    return selected || (el && el !== document.body && !el.id) || (el && /INPUT|SELECT|TEXTAREA/.test(el.tagName));
  }
  function start() {
    restore();
    var marker = document.getElementById("weave-refresh");
    var seconds = marker ? parseInt(marker.getAttribute("data-weave-refresh"), 10) : 0;
    if (!seconds) { return; }
    function tick() {
      if (busy()) { setTimeout(tick, 1000); return; }
      var el = document.activeElement;
      sessionStorage.setItem(KEY, JSON.stringify({ y: window.scrollY, focus: el && el.id ? el.id : null }));
      location.reload();
    }
    setTimeout(tick, seconds * 1000);
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
