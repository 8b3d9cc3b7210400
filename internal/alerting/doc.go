// Package alerting holds no code: its test checks deploy/prometheus/alerts.yml,
// the alert rules that ship with msgpulse, so a broken rules file or a
// renamed metric fails the build instead of silencing an alert in
// production.
package alerting
