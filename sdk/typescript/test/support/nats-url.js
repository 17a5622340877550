// Connect options for a NATS URL that may carry credentials, as the Go
// tests' servers hand them out (internal/natstest: nats://<token>@host:port;
// the chaos harness's NATS_URL, comma-separated, each with the harness's
// token). nats.go takes the credentials from the URL; nats.js drops them
// (it keeps only host and port), so the scripts the Go tests start pass
// them as options here. A URL without credentials gives { servers } alone.
// Usage: connect({ ...natsURL(url), name: "x" }).
export function natsURL(urls) {
  const servers = [];
  const auth = {};
  for (const u of urls.split(",").map((s) => s.trim()).filter(Boolean)) {
    const m = /^([a-z]+:\/\/)?(?:([^@/]*)@)?(.*)$/i.exec(u);
    servers.push((m[1] ?? "") + m[3]);
    if (m[2] === undefined) continue;
    const i = m[2].indexOf(":");
    if (i < 0) auth.token = decodeURIComponent(m[2]);
    else [auth.user, auth.pass] = [decodeURIComponent(m[2].slice(0, i)), decodeURIComponent(m[2].slice(i + 1))];
  }
  return { servers, ...auth };
}
