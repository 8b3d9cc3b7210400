// Package wecom sends WeCom (企业微信) application messages through the
// server API (cgi-bin/message/send, up to 1000 userids a call) and posts of
// group robots (cgi-bin/webhook/send), and classifies WeCom's errcodes.
//
// Like every provider it talks to the vendor and nothing else: the access
// token comes from a Tokens source (internal/token shares it through
// Redis), and the package must never touch Redis or AMQP itself, never log
// a message's content, never retry beyond the one resend that a
// refreshed token calls for, and never post to a robot for a tenant that
// WECOM_ROBOTS does not list with it.
package wecom
