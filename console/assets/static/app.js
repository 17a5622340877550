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

  // ---- signed approval proofs (docs/security.md) ----
  // An approver of signed proofs wants the answer signed with the
  // reviewer's nkey: it is signed here, in the browser. The key is read
  // from a field without a name (or a file) and never sent, stored or
  // written into the page.
  var B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

  function b32decode(s) {
    var out = [], bits = 0, value = 0;
    for (var i = 0; i < s.length; i++) {
      var v = B32.indexOf(s[i]);
      if (v < 0) throw new Error("The signing key is not an nkey seed (SU…).");
      value = (value << 5) | v;
      bits += 5;
      if (bits >= 8) { out.push((value >>> (bits - 8)) & 255); bits -= 8; }
    }
    return new Uint8Array(out);
  }

  function b32encode(bytes) {
    var out = "", bits = 0, value = 0;
    for (var i = 0; i < bytes.length; i++) {
      value = (value << 8) | bytes[i];
      bits += 8;
      while (bits >= 5) { out += B32[(value >>> (bits - 5)) & 31]; bits -= 5; }
    }
    if (bits > 0) out += B32[(value << (5 - bits)) & 31];
    return out;
  }

  // crc16 is CRC-16/XMODEM, the checksum of nkeys.
  function crc16(bytes) {
    var crc = 0;
    for (var i = 0; i < bytes.length; i++) {
      crc ^= bytes[i] << 8;
      for (var j = 0; j < 8; j++) crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
  }

  var PREFIX_SEED = 18 << 3, PREFIX_USER = 20 << 3;

  // userSeed decodes an nkey user seed ("SU…") to its 32 bytes.
  function userSeed(text) {
    var raw = b32decode(text.trim());
    if (raw.length !== 36) throw new Error("The signing key is not an nkey seed (SU…).");
    var body = raw.subarray(0, 34), sum = raw[34] | (raw[35] << 8);
    if (crc16(body) !== sum) throw new Error("The signing key's checksum is wrong: was it copied whole?");
    if ((raw[0] & 248) !== PREFIX_SEED) throw new Error("The signing key is not an nkey seed (SU…).");
    if ((((raw[0] & 7) << 5) | ((raw[1] & 248) >> 3)) !== PREFIX_USER) throw new Error("The signing key is not a user key (SU…).");
    return raw.slice(2, 34);
  }

  function userPublic(pub) {
    var raw = new Uint8Array(35);
    raw[0] = PREFIX_USER;
    raw.set(pub, 1);
    var sum = crc16(raw.subarray(0, 33));
    raw[33] = sum & 255;
    raw[34] = sum >> 8;
    return b32encode(raw);
  }

  function b64url(bytes) {
    var s = "";
    for (var i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function b64urlDecode(s) {
    var bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
    var out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  // digestInput is what package proof's digests hash: the domain, then
  // each field as a 4-byte big-endian length and its UTF-8 bytes.
  function digestInput(domain, fields) {
    var enc = new TextEncoder(), parts = [enc.encode(domain)];
    fields.forEach(function (f) {
      var b = enc.encode(f), n = new Uint8Array(4);
      new DataView(n.buffer).setUint32(0, b.length);
      parts.push(n, b);
    });
    var len = parts.reduce(function (a, b) { return a + b.length; }, 0), out = new Uint8Array(len), off = 0;
    parts.forEach(function (b) { out.set(b, off); off += b.length; });
    return out;
  }

  function unix(iso) { return String(Math.floor(Date.parse(iso) / 1000)); }

  // approvalDigest is proof.Digest's input for an approval proof: under
  // "weft approval proof v3", with the approved arguments' hash (empty)
  // and the reason after the key, for a reject signed with its reason;
  // under "weft approval proof v2", with the approved arguments' hash
  // after the key, for a proof of an edited approve (docs/semantics.md §4,
  // "Approving narrower arguments").
  function approvalDigest(p) {
    var fields = [p.answer, p.run, p.action, String(p.revision), p.requirement.name,
      String(p.requirement.version), p.tool, p.arguments_sha256, unix(p.expires), p.key];
    if (p.reason) return digestInput("weft approval proof v3", fields.concat([p.approved_sha256 || "", p.reason]));
    if (p.approved_sha256) return digestInput("weft approval proof v2", fields.concat([p.approved_sha256]));
    return digestInput("weft approval proof v1", fields);
  }

  // canonical is proof.Canonical of JSON text: whitespace outside strings
  // removed and, inside strings, <, >, &, U+2028 and U+2029 written as
  // \u escapes; everything else (key order, number spelling, other
  // escapes) kept. It throws on text that is not JSON.
  function canonical(text) {
    JSON.parse(text);
    var out = "", inString = false, escaped = false;
    for (var i = 0; i < text.length; i++) {
      var ch = text[i];
      if (inString) {
        if (escaped) escaped = false;
        else if (ch === "\\") escaped = true;
        else if (ch === '"') inString = false;
        out += ch;
      } else if (ch === '"') {
        inString = true;
        out += ch;
      } else if (ch !== " " && ch !== "\t" && ch !== "\n" && ch !== "\r") {
        out += ch;
      }
    }
    return out.replace(/[<>&\u2028\u2029]/g, function (c) { return "\\u" + ("000" + c.charCodeAt(0).toString(16)).slice(-4); });
  }

  // editedArguments is the canonical text of the form's edited arguments
  // (“Approve with changes”), or "" when there are none or they are the
  // arguments the call would run with anyway (approved as asked), as the
  // console reads them (console/act.go, editedArguments).
  function editedArguments(form) {
    var field = form.querySelector("textarea[name=arguments]");
    if (!field || !field.value.trim()) return "";
    var edit;
    try { edit = canonical(field.value.trim()); } catch (e) {
      throw new Error("The edited arguments are not JSON: correct them, or close “Approve with changes” to approve the call as asked.");
    }
    var runsWith = form.querySelector("input[name=runs_with]");
    return runsWith && canonical(runsWith.value) === edit ? "" : edit;
  }

  // commandDigest is proof.CommandDigest's input for a command proof.
  function commandDigest(p) {
    return digestInput("weft command proof v1", [p.command, p.run, p.action, p.content_sha256, p.reason, unix(p.expires), p.key]);
  }

  function hex(bytes) {
    return Array.prototype.map.call(bytes, function (b) { return (b < 16 ? "0" : "") + b.toString(16); }).join("");
  }

  // sign returns p signed by the user seed text: p with its key and the
  // signature over the SHA-256 of digest(p) (approvalDigest for an
  // events.ApprovalProof, commandDigest for an events.CommandProof).
  function sign(seedText, p, digest) {
    if (!window.crypto || !crypto.subtle) return Promise.reject(new Error("This page cannot sign: open the console over https or on localhost."));
    var seed = userSeed(seedText);
    // PKCS #8 of an Ed25519 private key: a fixed prefix and the seed.
    var pkcs8 = new Uint8Array(48);
    pkcs8.set([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]);
    pkcs8.set(seed, 16);
    seed.fill(0);
    var key;
    return crypto.subtle.importKey("pkcs8", pkcs8, { name: "Ed25519" }, true, ["sign"]).catch(function () {
      pkcs8.fill(0);
      throw new Error("This browser cannot sign with Ed25519 keys: use a current browser, or sign with weft — weft approve --signing-key for an answer, the line “Show the signing command” gives (weft … --print-proof) for a person's command.");
    }).then(function (k) {
      pkcs8.fill(0);
      key = k;
      return crypto.subtle.exportKey("jwk", k);
    }).then(function (jwk) {
      p.key = userPublic(b64urlDecode(jwk.x));
      return crypto.subtle.digest("SHA-256", digest(p));
    }).then(function (d) {
      return crypto.subtle.sign({ name: "Ed25519" }, key, d);
    }).then(function (sig) {
      p.signature = b64url(new Uint8Array(sig));
      return p;
    });
  }

  // signedLifetime is the proof lifetime (s) of the form's chosen
  // approver, 0 for one that takes a credential.
  function signedLifetime(form) {
    var sel = form.querySelector("select[data-approver]");
    var opt = sel && sel.selectedOptions[0];
    return opt && opt.dataset.signed ? Number(opt.dataset.signed) : 0;
  }

  // approverChanged shows the credential field or the signing key for the
  // chosen approver.
  function approverChanged(form) {
    var signing = signedLifetime(form) > 0;
    var cred = form.querySelector("[data-credential]"), key = form.querySelector("[data-signing]");
    if (cred) cred.hidden = signing;
    if (key) key.hidden = !signing;
    var help = form.querySelector("[data-signing-help]");
    if (help) help.textContent = "This approver takes a signed proof. This page signs exactly this request (run, action, revision, requirement, tool, arguments, your answer) with your key; the key is never sent and never kept.";
  }

  function readKey(form) {
    var text = form.querySelector("[data-signing-key]"), file = form.querySelector("[data-signing-file]");
    if (text && text.value.trim()) return Promise.resolve(text.value);
    if (file && file.files && file.files[0]) return file.files[0].text();
    return Promise.reject(new Error("Type your signing key (SU…) or choose its file."));
  }

  function forgetKey(form) {
    var text = form.querySelector("[data-signing-key]"), file = form.querySelector("[data-signing-file]");
    if (text) text.value = "";
    if (file) file.value = "";
  }

  // goTrimSpace is Go's strings.TrimSpace: the white space of
  // unicode.IsSpace (JavaScript's trim also takes U+FEFF, not U+0085).
  var goTrim = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;
  function goTrimSpace(s) { return s.replace(goTrim, ""); }

  // proofFor signs the form's request with the answer of the button
  // pressed. Its expiry is the approver's lifetime from now by the
  // console's clock (estimated from the card's render time), less a margin
  // for the trip and for clocks apart.
  function proofFor(form, submitter) {
    var life = signedLifetime(form), d = form.dataset;
    var now = Date.now() + Number(form.dataset.clockOffset || 0);
    var expires = Math.floor(now / 1000) + life - Math.min(10, Math.floor(life / 4));
    var p = {
      key: "", run: form.querySelector("input[name=run]").value, action: form.querySelector("input[name=action]").value,
      revision: Number(form.querySelector("input[name=revision]").value),
      requirement: { name: d.requirementName, version: Number(d.requirementVersion) },
      tool: d.tool, arguments_sha256: d.argumentsSha256, answer: submitter ? submitter.value : "",
      expires: new Date(expires * 1000).toISOString().replace(".000Z", "Z"), signature: ""
    };
    // An approve states the approved arguments' hash: of its own edit, or
    // else of the edit the call already runs with (proof.Subject.WithApproved).
    var approved = Promise.resolve(p.answer === "approve" ? d.approvedSha256 || "" : "");
    if (p.answer === "approve") {
      var edit;
      try { edit = editedArguments(form); } catch (err) { return Promise.reject(err); }
      if (edit) approved = crypto.subtle.digest("SHA-256", new TextEncoder().encode(edit)).then(function (sum) { return hex(new Uint8Array(sum)); });
    }
    // A reject states the reason the console sends (strings.TrimSpace of
    // the field), so that its proof covers the reason the model reads.
    var reason = form.querySelector("textarea[name=reason], input[name=reason]");
    return approved.then(function (h) {
      if (h) p.approved_sha256 = h;
      if (p.answer === "reject" && reason) {
        var r = goTrimSpace(reason.value);
        if (r) p.reason = r;
      }
      return readKey(form);
    }).then(function (text) { return sign(text, p, approvalDigest); });
  }

  // ---- signed command proofs (docs/security.md, "Who did it") ----
  // A person's command (reconcile, resolve, cancel, pause, resume) is
  // signed here with the person's key when one is given: the console says
  // what the command is (its signing statement: the form sent with
  // prepare, nothing done), the page signs exactly that, and sends the
  // form again with the proof. The runner checks the proof against the
  // command it gets.
  function hasKey(form) {
    var text = form.querySelector("[data-signing-key]"), file = form.querySelector("[data-signing-file]");
    return !!((text && text.value.trim()) || (file && file.files && file.files[0]));
  }

  function post(form, body) {
    return fetch(form.getAttribute("action"), {
      method: "POST", body: body, credentials: "same-origin",
      headers: { "Accept": "application/json" }
    }).then(function (r) { return r.json(); });
  }

  // commandProofFor asks the console for the form's signing statement and
  // signs it; a form the console does not send is answered (the promise
  // resolves to null).
  function commandProofFor(form, submitter) {
    var body = new URLSearchParams(new FormData(form, submitter));
    body.delete("proof");
    body.set("prepare", "sign");
    var st;
    return post(form, body).then(function (ans) {
      if (!ans.sign) { showResult(form, ans); return null; }
      st = ans.sign;
      var content = st.content ? crypto.subtle.digest("SHA-256", new TextEncoder().encode(st.content)) : Promise.resolve(null);
      return content.then(function (sum) {
        // The expiry is from the console's clock: the viewer's may be off.
        var expires = Math.floor(st.now / 1000) + st.lifetime;
        var p = {
          key: "", command: st.command, run: st.run, action: st.action || "", content_sha256: sum ? hex(new Uint8Array(sum)) : "",
          reason: st.reason || "", expires: new Date(expires * 1000).toISOString().replace(".000Z", "Z"), signature: ""
        };
        return readKey(form).then(function (text) { return sign(text, p, commandDigest); });
      });
    });
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
      if (ans.link && form.hasAttribute("data-link")) {
        // A form whose outcome is elsewhere (a restart's new run).
        var open = document.createElement("a");
        open.href = ans.link;
        open.setAttribute("data-outcome-link", "");
        open.textContent = "Open it";
        p.append(" ", open);
      }
    } else if (ans.unknown) {
      // Whether the command took effect is not known: the form keeps its
      // command id (sent again, it acts at most once); the run shows it.
      p.className = "answer bad";
      p.setAttribute("role", "alert");
      var nk = document.createElement("strong");
      nk.textContent = "Not known. ";
      p.append(nk, ans.message);
      if (ans.link) {
        var a = document.createElement("a");
        a.href = ans.link;
        a.textContent = "Open the run";
        p.append(" ", a);
      }
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
    if (ans.sign) {
      // The command's signing statement: the weft command that signs it
      // (to paste its proof), or the key, on the form.
      var how = document.createElement("p");
      how.textContent = "Without the key in this page: run this with your key file and paste what it prints under “Or paste a signed proof”:";
      var pre = document.createElement("pre");
      pre.className = "weft-command";
      pre.setAttribute("data-weft-command", "");
      pre.textContent = ans.sign.weft;
      box.append(how, pre);
      var det = form.querySelector("details.signing");
      if (det) det.open = true;
    }
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
    if (form.hasAttribute("data-approval")) {
      if (form.dataset.now) form.dataset.clockOffset = String(Number(form.dataset.now) - Date.now());
      form.addEventListener("change", function (e) { if (e.target.matches("select[data-approver]")) approverChanged(form); });
      approverChanged(form);
    }
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var submitter = e.submitter || null;
      if (form.hasAttribute("data-approval") && signedLifetime(form) > 0) {
        var box = form.querySelector("[data-result]");
        if (box) box.textContent = "Signing…";
        proofFor(form, submitter).then(function (p) {
          send(form, submitter, JSON.stringify(p));
        }).catch(function (err) {
          showResult(form, { ok: false, message: String(err && err.message || err) });
        });
        return;
      }
      if (form.querySelector("[data-person-signing]") && !(submitter && submitter.hasAttribute("data-prepare")) && hasKey(form)) {
        var out = form.querySelector("[data-result]");
        if (out) out.textContent = "Signing…";
        commandProofFor(form, submitter).then(function (p) {
          if (p) send(form, submitter, JSON.stringify(p));
        }).catch(function (err) {
          showResult(form, { ok: false, message: String(err && err.message || err) });
        });
        return;
      }
      send(form, submitter, "");
    });
  }

  // send posts the form (with the signed proof, if any) and shows the
  // answer next to its buttons.
  function send(form, submitter, signedProof) {
    var body = new URLSearchParams(new FormData(form, submitter));
    if (signedProof) {
      body.set("proof", signedProof);
      // The seed has done its work: whatever the answer (done, refused,
      // unknown), it does not stay in the page; to sign again the person
      // types or chooses it again.
      forgetKey(form);
    }
    // A second press while the first is in flight sends the same
    // command id: the command API answers both with the one result.
    form.dataset.busy = String(Number(form.dataset.busy || 0) + 1);
    form.setAttribute("aria-busy", "true");
    var box = form.querySelector("[data-result]");
    if (box && !box.textContent) box.textContent = "Sending…";
    // (form.action would be the input named "action")
    post(form, body).then(function (ans) {
      showResult(form, ans);
      if (ans.ok && form.hasAttribute("data-again") && ans.next_command_id) {
        // A form that acts again (Start a run): ready for the next one,
        // with a new command id and the run id it used cleared.
        delete form.dataset.dirty;
        form.querySelector("input[name=command_id]").value = ans.next_command_id;
        var runID = form.querySelector("input[name=run]");
        if (runID) runID.value = "";
        notice(ans.message, ans.link);
      } else if (ans.ok) {
        delete form.dataset.dirty;
        form.dataset.done = "1";
        form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
        notice(ans.message, ans.link);
        // Holds are not run events (no live change comes): the list is
        // read again after the viewer's own place or release.
        if (form.closest("#holds")) refreshHolds();
      } else if (ans.unknown) {
        // Keep the command id; a start keeps the run id the console chose.
        // The form stays as it is (with its answer) across live refreshes:
        // one rendered again would carry a new command id and run id, and
        // a restart sent with them would be a second run.
        form.dataset.unknown = "1";
        var run = form.querySelector("input[name=run]");
        if (run && ans.run) run.value = ans.run;
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
  }

  // refreshHolds reads the run page again and replaces its list of legal
  // holds, keeping an active hold's row whose release form is being typed
  // into or sent.
  function refreshHolds() {
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var old = document.getElementById("holds-list");
        var neu = new DOMParser().parseFromString(html, "text/html").getElementById("holds-list");
        if (!old || !neu) return;
        var olds = {};
        old.querySelectorAll("li[data-hold]").forEach(function (li) { olds[li.dataset.hold] = li; });
        var fresh = document.importNode(neu, true);
        fresh.querySelectorAll("li[data-hold]").forEach(function (li) {
          var o = olds[li.dataset.hold];
          if (o && li.dataset.active === "true" && o.querySelector("form[data-dirty], form[data-busy], form[data-refused], form[data-unknown]")) li.replaceWith(o);
        });
        old.replaceWith(fresh);
        enhance(fresh);
      })
      .catch(function () {});
  }

  function enhance(root) {
    formatTimes(root);
    root.querySelectorAll("form[data-act]").forEach(enhanceForm);
    root.querySelectorAll("input[data-tz]").forEach(function (i) { i.value = String(new Date().getTimezoneOffset()); });
  }

  // ---- live regions ----
  // busy reports whether the viewer is working in el: focus in a field or
  // anywhere in a card (a linked card, its Copy link), a form typed into,
  // in flight, or showing a refusal or an answer not known.
  function busy(el) {
    var a = document.activeElement;
    if (a && a !== document.body && el.contains(a) &&
        (/^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName) || (a.closest && a.closest("[data-key]")))) return true;
    // A form answered here (data-done) stays with its answer until reload.
    var sel = "form[data-dirty], form[data-busy], form[data-refused], form[data-done], form[data-unknown]";
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
    // Moving the kept nodes back in drops the focus: give it back.
    var a = document.activeElement;
    old.replaceChildren.apply(old, nodes);
    if (a && a !== document.activeElement && document.contains(a)) a.focus({ preventScroll: true });
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

  // ---- shareable links: "Copy link" on a card, the linked card focused ----
  // The link is a real link (without the script it opens the item); the
  // script copies its absolute URL instead and says so next to it.
  document.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a[data-copy-link]");
    if (!a) return;
    e.preventDefault();
    var url = new URL(a.getAttribute("href"), location.href).href;
    var say = a.parentNode.querySelector("[data-copied]");
    var done = function (text) { if (say) say.textContent = text; };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(url).then(function () { done("Link copied."); },
        function () { done("Copy this link: " + url); });
    } else {
      done("Copy this link: " + url);
    }
  });

  function focusLinked() {
    if (!location.hash) return;
    var id;
    // A malformed fragment (a hand-made or cut link) names no card.
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; }
    var el = document.getElementById(id);
    if (el && el.classList.contains("card")) { el.focus(); el.dataset.linked = ""; }
  }

  document.addEventListener("DOMContentLoaded", function () {
    enhance(document);
    live();
    focusLinked();
  });
})();
