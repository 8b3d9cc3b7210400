package unsubscribe

import "html/template"

// The pages: small, no script, no outside resource, the button a plain
// form that POSTs RFC 8058's body to the page's own URL.
const layout = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{{block "title" .}}{{end}}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}
button{font:inherit;padding:.5rem 1.25rem;border:0;border-radius:.25rem;background:#0b57d0;color:#fff;cursor:pointer}</style>
</head><body>{{block "body" .}}{{end}}</body></html>`

func page(body string) *template.Template {
	return template.Must(template.Must(template.New("layout").Parse(layout)).Parse(body))
}

var (
	confirmPage = page(`{{define "title"}}Unsubscribe{{end}}{{define "body"}}
<h1 id="title">Unsubscribe</h1>
<p id="what">Stop notices from <b>{{.Tenant}}</b> to <b>{{.Recipient}}</b>? Verification codes still arrive.</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">
<button id="unsubscribe" type="submit">Unsubscribe</button></form>{{end}}`)
	donePage = page(`{{define "title"}}Unsubscribed{{end}}{{define "body"}}
<h1 id="title">Unsubscribed</h1>
<p id="what"><b>{{.Recipient}}</b> gets no more notices from <b>{{.Tenant}}</b>. Verification codes still arrive.</p>{{end}}`)
	invalidPage = page(`{{define "title"}}Link not valid{{end}}{{define "body"}}
<h1 id="title">This unsubscribe link is not valid</h1>
<p>Use the link in the mail as it arrived, or your mail program's own unsubscribe button.</p>{{end}}`)
	badRequestPage = page(`{{define "title"}}Not understood{{end}}{{define "body"}}
<h1 id="title">The request was not understood</h1>
<p>Open the link again and press the button.</p>{{end}}`)
	retryPage = page(`{{define "title"}}Try again{{end}}{{define "body"}}
<h1 id="title">Nothing changed yet</h1>
<p>We could not save your request just now. Please press the button again in a moment.</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">
<button id="unsubscribe" type="submit">Unsubscribe</button></form>{{end}}`)
)
