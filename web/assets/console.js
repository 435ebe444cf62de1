// fleetwatch's own script (web/assets.py FILES), beside htmx 2: what a page that updates
// while open needs beyond htmx's attributes. No eval and no inline script (the
// Content-Security-Policy allows neither; htmx runs with allowEval false).
//
// The poller is base.html's #live: every web.refresh seconds it asks for the same page and
// swaps its <main> for the new one's. Here:
// - no update while the user edits a form, has opened one (a row's <details> Ack), selects
//   text, or the tab is hidden (a hidden tab costs the console nothing; it updates as soon
//   as it is shown again);
// - an answer that is not this page (the session ended: redirected to /login) reloads the
//   whole page, so the login form is never swapped into it;
// - #live says when the page was last updated (HH:MM:SS UTC), or why not.
(function () {
  "use strict";

  var FIELDS = "input, textarea, select";

  function poller() {
    return document.getElementById("live");
  }

  var answerRefused = false;

  function fromPoller(evt) {
    // (htmx:beforeSwap is dispatched on the target, <main>: its request names the poller)
    var elt = poller();
    var detail = evt.detail;
    return elt !== null && detail !== undefined && (detail.elt === elt
        || (detail.requestConfig !== undefined && detail.requestConfig.elt === elt));
  }

  function say(text, stale) {
    var elt = poller();
    if (elt) {
      elt.textContent = text;
      elt.classList.toggle("stale", stale);
    }
  }

  function changed(field) {
    if (field.type === "hidden" || field.type === "submit" || field.type === "button") {
      return false;
    }
    if (field.type === "checkbox" || field.type === "radio") {
      return field.checked !== field.defaultChecked;
    }
    if (field.tagName === "SELECT" && !field.multiple) {
      // a select without a `selected` option shows its first one: that is no edit
      var initial = 0;
      for (var i = 0; i < field.options.length; i++) {
        if (field.options[i].defaultSelected) { initial = i; break; }
      }
      return field.selectedIndex !== initial;
    }
    if (field.tagName === "SELECT") {
      return Array.prototype.some.call(field.options, function (o) {
        return o.selected !== o.defaultSelected;
      });
    }
    return field.value !== field.defaultValue;
  }

  function editing(main) {
    var active = document.activeElement;
    if (active && main.contains(active) && active.matches(FIELDS)) {
      return true;
    }
    if (Array.prototype.some.call(main.querySelectorAll(FIELDS), changed)) {
      return true;
    }
    if (main.querySelector("details.act[open]") !== null) {
      return true;
    }
    var selection = window.getSelection();
    return selection !== null && !selection.isCollapsed && main.contains(selection.anchorNode);
  }

  function now() {
    // the console's one time format, the tables' (fleetwatch/display.py HUMAN): 24-hour
    // UTC with the zone said, never the browser's local 12-hour clock
    return new Date().toISOString().slice(11, 19) + " UTC";
  }

  // a list's header box ticks (or unticks) every row of its bulk form (web/bulk.py)
  document.addEventListener("change", function (evt) {
    var box = evt.target;
    if (!box.matches || !box.matches("input[data-ticks]")) {
      return;
    }
    var rows = document.querySelectorAll(
      "input[type=checkbox][name=target][form='" + box.dataset.ticks + "']");
    Array.prototype.forEach.call(rows, function (row) { row.checked = box.checked; });
  });

  document.addEventListener("htmx:confirm", function (evt) {
    if (!fromPoller(evt)) {
      return;
    }
    var main = document.querySelector("main");
    if (document.hidden) {
      evt.preventDefault();
      poller().dataset.missed = "1";
    } else if (main && editing(main)) {
      evt.preventDefault();
      say("Not updating while you edit (" + now() + ")", false);
    }
  });

  document.addEventListener("visibilitychange", function () {
    var elt = poller();
    if (!document.hidden && elt && elt.dataset.missed) {
      delete elt.dataset.missed;
      window.htmx.trigger(elt, "live-refresh");
    }
  });

  document.addEventListener("htmx:beforeSwap", function (evt) {
    if (!fromPoller(evt)) {
      return;
    }
    var detail = evt.detail;
    var asked = detail.pathInfo.requestPath.split("?")[0];
    var answered = (detail.pathInfo.responsePath || asked).split("?")[0];
    answerRefused = true;
    if (answered !== asked) {
      detail.shouldSwap = false;
      say("Signed out: reloading", true);
      window.location.reload();
    } else if (!detail.shouldSwap) {
      say("Not updated: the console answered " + detail.xhr.status + " (" + now() + ")", true);
    } else if (!/<main[\s>]/.test(detail.xhr.responseText)) {
      detail.shouldSwap = false;
      say("Not updated: the answer had no page in it (" + now() + ")", true);
    } else {
      answerRefused = false;
    }
  });

  document.addEventListener("htmx:afterRequest", function (evt) {
    if (fromPoller(evt) && evt.detail.successful && !answerRefused) {
      say("Updated " + now(), false);
    }
  });

  document.addEventListener("htmx:sendError", function (evt) {
    if (fromPoller(evt)) {
      say("Not updated: the console did not answer (" + now() + ")", true);
    }
  });
}());
