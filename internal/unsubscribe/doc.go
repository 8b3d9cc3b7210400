// Package unsubscribe is the reader's side of one-click unsubscribe (RFC
// 8058): the page and the POST behind the List-Unsubscribe link of a mail
// notice, GET and POST /unsubscribe/{token} on the API's HTTP server,
// outside X-API-Key (the reader's mail client calls them, not a tenant).
//
// GET shows a page with a button and changes nothing: mail clients, link
// scanners and previews fetch links nobody clicked. POST with the body
// List-Unsubscribe=One-Click (what a mail client's own button sends, and
// what the page's button sends) adds an unsubscribe entry for the token's
// tenant, channel and recipient to the suppression list, which stops that
// tenant's notices to that address and never its verification codes.
//
// It must never act on a token whose signature does not verify, never
// change anything on a GET, never log or show a token (it is the
// reader's key to their subscription; redact takes it out of echo's own
// error lines too), and never read more of a body than RFC 8058's one
// field needs.
package unsubscribe
