// Package console is msgpulse's on-call web console, served by the API at
// /console: queue depths and fill, the WeCom accounts' state (read through
// the API's reader, never written), the dead-letter queues with their
// messages, replay and purge with a confirmation step, message lookup by
// taskId or batchId, a chart of the last hour's sends, failures and delay
// accuracy, and the SMS fraud guard's blocks, which it can lift.
//
// It is a face, like cmd/dlq: every dead-letter operation goes through
// dlq.Tool, the code behind cmd/dlq, so the console reads, replays and
// purges by the same rules (reading never loses or reorders a dead
// letter). Queues come from the topology model, never from names typed
// here, so a new channel or level shows up without a change.
//
// Pages are html/template rendered on the server and embedded in the
// binary, with no script and no request to anything but the API (a strict
// Content-Security-Policy says so to the browser). A person logs in with
// an admin API key and its name; the browser then holds only a random
// session id (HttpOnly, SameSite=Strict), never the key. The session is a
// record in Redis bound to the key's name and value, so logout or a
// removed or changed key ends it for every replica, and no secret can
// mint one (there is nothing to sign). Every action is a POST carrying a
// CSRF token and asks for confirmation; each is logged with the key's
// name.
//
// It must never show a verification code (sealed or open), a code digest
// or a full recipient, and never send anything itself. What a page shows
// of a message or status record is masked by an allow-list (mask.go):
// a field not listed there is masked, so a new field is safe by default.
// It must never accept a session it did not store, nor check a login's key
// before counting the attempt.
package console
