// Weft console: the one script. Every page works without it; with it,
// times are shown in the viewer's zone, forms are sent without reloading
// (the answer, or the refusal's code, shown next to the button), and the
// regions of a page are swapped for fresh ones when the server says the
// data changed. Nothing here stores or sends anything but the forms.
(function () {
  "use strict";

  // ---- times: the viewer's zone, the recorded UTC time in the title ----
  var dateFmt = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
  });

  var preciseFmt = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3, timeZoneName: "short"
  });

  function span(ms) {
    var s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return s + " s";
    var m = Math.round(s / 60);
    if (m < 60) return m + " min";
    var h = Math.floor(m / 60);
    if (h < 48) return h + " h " + (m % 60) + " min";
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
  }

  function formatTime(el) {
    var d = new Date(el.getAttribute("datetime"));
    if (isNaN(d)) return;
    if (!el.dataset.utc) el.dataset.utc = el.getAttribute("title") || "";
    var local = (el.hasAttribute("data-precise") ? preciseFmt : dateFmt).format(d);
    var text = local;
    if (el.hasAttribute("data-countdown")) {
      var left = d.getTime() - Date.now();
      text = left > 0 ? "in " + span(left) + " (" + local + ")" : "now: expired at " + local;
    } else if (el.hasAttribute("data-age")) {
      text = local + " (" + span(Date.now() - d.getTime()) + " ago)";
    }
    if (el.textContent !== text) el.textContent = text;
    el.title = "Recorded " + el.dataset.utc;
  }

  function formatTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(formatTime);
  }

  setInterval(function () {
    document.querySelectorAll("time[data-countdown], time[data-age]").forEach(formatTime);
  }, 1000);

  // ---- notices: outcomes of actions, announced politely ----
  function notice(text, link) {
    var box = document.getElementById("notices");
    if (!box) return;
    var p = document.createElement("p");
    p.className = "notice ok";
    p.textContent = text + " ";
    if (link) {
      var a = document.createElement("a");
      a.href = link;
      a.textContent = "Open the run";
      p.appendChild(a);
    }
    box.prepend(p);
    while (box.children.length > 4) box.lastElementChild.remove();
  }

  // ---- forms ----
  function showResult(form, ans) {
    var box = form.querySelector("[data-result]");
    if (!box) return;
    box.replaceChildren();
    var p = document.createElement("p");
    if (ans.ok) {
      p.className = "answer ok";
      p.setAttribute("role", "status");
      p.textContent = ans.message;
    } else if (ans.code) {
      p.className = "answer bad";
      p.setAttribute("role", "alert");
      var strong = document.createElement("strong");
      strong.append("Refused: ");
      var code = document.createElement("code");
      code.className = "code";
      code.textContent = ans.code;
      strong.append(code);
      if (ans.reason) {
        strong.append(" (");
        var reason = document.createElement("code");
        reason.className = "reason";
        reason.textContent = ans.reason;
        strong.append(reason, ")");
      }
      p.append(strong, " " + ans.message);
    } else {
      p.className = "answer bad";
      p.setAttribute("role", "alert");
      var s = document.createElement("strong");
      s.textContent = "Not sent. ";
      p.append(s, ans.message);
    }
    box.appendChild(p);
  }

  function kinds(form) {
    var checked = form.querySelector("input[name=kind]:checked");
    form.querySelectorAll("fieldset.kind").forEach(function (fs) {
      var on = checked && fs.dataset.kind === checked.value;
      fs.disabled = !on;
      fs.hidden = !on;
    });
  }

  function enhanceForm(form) {
    if (form.dataset.enhanced) return;
    form.dataset.enhanced = "1";
    form.addEventListener("input", function () { form.dataset.dirty = "1"; delete form.dataset.refused; });
    if (form.hasAttribute("data-reconcile")) {
      form.addEventListener("change", function (e) { if (e.target.name === "kind") kinds(form); });
      kinds(form);
    }
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var body = new URLSearchParams(new FormData(form, e.submitter || null));
      // A second press while the first is in flight sends the same
      // command id: the command API answers both with the one result.
      form.dataset.busy = String(Number(form.dataset.busy || 0) + 1);
      form.setAttribute("aria-busy", "true");
      var box = form.querySelector("[data-result]");
      if (box && !box.textContent) box.textContent = "Sending…";
      // (form.action would be the input named "action")
      fetch(form.getAttribute("action"), {
        method: "POST", body: body, credentials: "same-origin",
        headers: { "Accept": "application/json" }
      }).then(function (r) {
        return r.json();
      }).then(function (ans) {
        showResult(form, ans);
        if (ans.ok) {
          delete form.dataset.dirty;
          form.dataset.done = "1";
          form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
          notice(ans.message, ans.link);
        } else {
          form.dataset.refused = "1";
          var id = form.querySelector("input[name=command_id]");
          if (id && ans.next_command_id) id.value = ans.next_command_id;
        }
      }).catch(function (err) {
        showResult(form, { ok: false, message: "The console did not answer (" + err + "). Nothing is known to be done: send again (the same command id acts once)." });
      }).finally(function () {
        var n = Number(form.dataset.busy || 1) - 1;
        if (n > 0) { form.dataset.busy = String(n); } else { delete form.dataset.busy; form.removeAttribute("aria-busy"); }
      });
    });
  }

  function enhance(root) {
    formatTimes(root);
    root.querySelectorAll("form[data-act]").forEach(enhanceForm);
    root.querySelectorAll("input[data-tz]").forEach(function (i) { i.value = String(new Date().getTimezoneOffset()); });
  }

  // ---- live regions ----
  // busy reports whether the viewer is working in el: focus in a field, a
  // form typed into, in flight, or showing a refusal.
  function busy(el) {
    var a = document.activeElement;
    if (a && a !== document.body && el.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) return true;
    // A form answered here (data-done) stays with its answer until reload.
    var sel = "form[data-dirty], form[data-busy], form[data-refused], form[data-done]";
    return !!el.querySelector(sel) || (el.matches && el.matches(sel));
  }

  function mergeList(old, neu) {
    var olds = {};
    old.querySelectorAll(":scope > [data-key]").forEach(function (n) { olds[n.dataset.key] = n; });
    var nodes = [];
    neu.querySelectorAll(":scope > [data-key]").forEach(function (n) {
      var o = olds[n.dataset.key];
      delete olds[n.dataset.key];
      nodes.push(o && busy(o) ? o : document.importNode(n, true));
    });
    Object.keys(olds).forEach(function (k) {
      var o = olds[k];
      if (busy(o)) {
        if (!o.querySelector(".gone-note") && !o.querySelector("form[data-done]")) {
          var p = document.createElement("p");
          p.className = "gone-note";
          p.textContent = "This item is no longer waiting (answered or changed elsewhere).";
          (o.firstElementChild || o).prepend(p);
        }
        nodes.push(o);
      }
    });
    old.replaceChildren.apply(old, nodes);
  }

  function mergeRegion(old, neu) {
    if (!busy(old)) {
      var fresh = document.importNode(neu, true);
      old.replaceWith(fresh);
      enhance(fresh);
      return;
    }
    neu.querySelectorAll("[data-live-list]").forEach(function (nl) {
      var ol = nl.id && document.getElementById(nl.id);
      if (ol && old.contains(ol)) mergeList(ol, nl);
    });
    neu.querySelectorAll("[data-count]").forEach(function (nc, i) {
      var oc = old.querySelectorAll("[data-count]")[i];
      if (oc) oc.textContent = nc.textContent;
    });
    enhance(old);
  }

  var refreshing = false, again = false;
  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(location.href, { headers: { "X-Weft-Live": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live-region]").forEach(function (old) {
          var neu = doc.getElementById(old.id);
          if (neu) { mergeRegion(old, neu); } else if (!busy(old)) { old.replaceChildren(); }
        });
        if (doc.title) document.title = doc.title;
        // The fresh page's stream query names what it shows now: a stream
        // opened later (after a pause) reports only changes since.
        if (doc.body && doc.body.dataset.live) document.body.dataset.live = doc.body.dataset.live;
        document.querySelectorAll(".jump .count").forEach(function (c, i) {
          var n = doc.querySelectorAll(".jump .count")[i];
          if (n) c.textContent = n.textContent;
        });
        document.body.dataset.updated = String(Date.now());
      })
      .catch(function () {})
      .finally(function () {
        refreshing = false;
        if (again) { again = false; refresh(); }
      });
  }

  // The stream is open only while the page is visible: a tab in the
  // background asks nothing of the server, and catches up when shown.
  function live() {
    var status = document.getElementById("live-status");
    if (!document.body.dataset.live || !window.EventSource) return;
    var say = function (t, cls) { if (status) { status.textContent = t; status.className = "live-status " + (cls || ""); } };
    var es = null;
    function connect() {
      if (es) return;
      say("Connecting for live updates…");
      es = new EventSource(document.body.dataset.live);
      es.onopen = function () { say("Live: this page updates itself.", "on"); };
      es.addEventListener("change", refresh);
      es.addEventListener("trouble", function (e) { say("Weft did not answer (" + e.data + "); retrying.", "off"); });
      es.addEventListener("ok", function () { say("Live: this page updates itself.", "on"); refresh(); });
      es.onerror = function () {
        if (es && es.readyState === EventSource.CLOSED) {
          say("Live updates stopped; reload to refresh.", "off");
        } else {
          say("Live updates lost; reconnecting…", "off");
        }
      };
    }
    function pause() {
      if (!es) return;
      es.close();
      es = null;
      say("Paused while this tab is in the background.", "paused");
    }
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) { pause(); } else { connect(); }
    });
    if (document.hidden) { say("Paused while this tab is in the background.", "paused"); } else { connect(); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    enhance(document);
    live();
  });
})();
