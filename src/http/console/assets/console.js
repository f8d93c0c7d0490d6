// Custodian console: the only script. Copy buttons, confirmations and passkey ceremonies;
// every page but the passkey forms works without it.
"use strict";
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source || !navigator.clipboard) return;
  navigator.clipboard.writeText(source.textContent.trim()).then(
    () => { button.textContent = "Copied"; },
    () => { button.textContent = "Select and copy by hand"; },
  );
});
document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

// Passkeys (WebAuthn). The server sends options with binary fields in base64url and takes the
// browser's credential back as JSON in the same encoding.
const b64u = (buffer) => btoa(String.fromCharCode(...new Uint8Array(buffer)))
  .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const unb64u = (text) => Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));

function credentialJson(credential) {
  const r = credential.response;
  const response = { clientDataJSON: b64u(r.clientDataJSON) };
  if (r.attestationObject) response.attestationObject = b64u(r.attestationObject);
  if (r.authenticatorData) response.authenticatorData = b64u(r.authenticatorData);
  if (r.signature) response.signature = b64u(r.signature);
  if (r.userHandle) response.userHandle = b64u(r.userHandle);
  return { id: credential.id, rawId: b64u(credential.rawId), type: credential.type, response, extensions: {} };
}

function requestOptions(options) {
  const p = options.publicKey;
  p.challenge = unb64u(p.challenge);
  (p.allowCredentials || []).forEach((c) => { c.id = unb64u(c.id); });
  return { publicKey: p };
}

function creationOptions(options) {
  const p = options.publicKey;
  p.challenge = unb64u(p.challenge);
  p.user.id = unb64u(p.user.id);
  (p.excludeCredentials || []).forEach((c) => { c.id = unb64u(c.id); });
  return { publicKey: p };
}

// POSTs `body` (JSON, or the form's CSRF field) and returns the JSON answer; throws its error.
async function ask(url, body, form) {
  const init = form
    ? { method: "POST", headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ csrf: form.querySelector("[name=csrf]").value }) }
    : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const answer = await fetch(url, { ...init, credentials: "same-origin" });
  const json = await answer.json();
  if (!answer.ok) throw new Error(json.error || answer.statusText);
  return json;
}

function passkeyFailed(form, error) {
  let note = form.querySelector(".passkey-error");
  if (!note) {
    note = document.createElement("p");
    note.className = "passkey-error alert error";
    note.setAttribute("role", "alert");
    form.prepend(note);
  }
  note.textContent = "Passkey: " + error.message;
}

document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (form.dataset.passkeySignin) {
    event.preventDefault();
    try {
      const email = document.getElementById("email");
      const options = await ask(form.dataset.passkeySignin, email && email.value ? { email: email.value } : {});
      const credential = credentialJson(await navigator.credentials.get(requestOptions(options)));
      form.querySelector("[name=passkey]").value = JSON.stringify(credential);
      form.querySelector("[name=userId]").value = credential.response.userHandle || "";
      form.submit();
    } catch (error) { passkeyFailed(form, error); }
  } else if (form.dataset.passkeyRegister && !form.querySelector("[name=credential]").value) {
    event.preventDefault();
    try {
      const options = await ask(form.dataset.passkeyRegister, null, form);
      const credential = await navigator.credentials.create(creationOptions(options));
      form.querySelector("[name=credential]").value = JSON.stringify(credentialJson(credential));
      form.submit();
    } catch (error) { passkeyFailed(form, error); }
  }
});

// "Use a passkey": an assertion in place of the one-time code of the field it names.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-passkey-otp]");
  if (!button) return;
  const field = document.getElementById(button.dataset.passkeyOtp);
  const form = button.closest("form");
  try {
    const options = await ask("/console/security/passkeys/assert", null, form);
    const credential = await navigator.credentials.get(requestOptions(options));
    field.value = JSON.stringify(credentialJson(credential));
    button.textContent = "Passkey ready";
  } catch (error) { passkeyFailed(form, error); }
});
