// Package console is msgpulse's on-call web console, served by the API at
// /console: queue depths and fill, the dead-letter queues with their
// messages, replay and purge with a confirmation step, message lookup by
// taskId or batchId, and a chart of the last hour's sends, failures and delay
// accuracy.
//
// It is a face, like cmd/dlq: every dead-letter operation goes through
// dlq.Tool, the code behind cmd/dlq, so the console reads, replays and
// purges by the same rules (reading never loses or reorders a dead
// letter). Queues come from the topology model, never from names typed
// here, so a new channel or level shows up without a change.
//
// Pages are html/template rendered on the server and embedded in the
// binary, with no script and no request to anything but the API (a strict
// Content-Security-Policy says so to the browser). A person logs in by
// pasting an API key; the browser then holds only a signed session cookie
// (HttpOnly, SameSite=Strict) naming the key, never the key. Every action
// is a POST carrying a CSRF token and asks for confirmation; each is
// logged with the key's name.
//
// It must never show a verification code (sealed or open), a code digest
// or a full recipient, and never send anything itself.
package console
