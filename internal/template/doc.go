// Package template turns a template code, a locale and a set of variables
// into the subject and bodies of an email, or the text of an SMS.
//
// Templates are files: built-in defaults are embedded in the binary
// (templates/<code>/...) and TEMPLATES_DIR may add templates or replace a
// built-in one by code. Every file is parsed and test-executed once, at
// Load, so a broken template stops the program at start-up instead of
// failing messages one at a time.
//
// Layout, the same for the built-ins (templates/ in this package) and for
// TEMPLATES_DIR:
//
//	<code>/template.yaml           variables: [code, ttlMinutes]
//	                               channels: [email, sms]
//	                               kind: code  (carries a verification code)
//	<code>/<locale>/subject.txt    email subject (text/template; one line)
//	<code>/<locale>/body.html      email HTML part (html/template: escapes)
//	<code>/<locale>/body.txt       email text part (text/template)
//	<code>/<locale>/sms.txt        SMS text (text/template)
//
// A locale directory holds exactly the files its channels need. Variables
// are written {{.name}} and must be listed in template.yaml.
//
// The API calls Validate to reject a request (400) before anything is
// queued; the consumer calls RenderEmail or RenderSMS. Both see the same
// rules, so a message the API accepted renders in the consumer. A template
// of kind code (IsCode: verify_code, or kind: code in template.yaml) is
// only ever sent as a verification code, never as a message.
//
// This package must never send, log or store what it renders: rendered text
// carries verification codes. It never reads the network, and it never
// panics on a bad template or bad variables; it returns an error.
package template
