// Package alerting holds no code: its tests check what ships for
// monitoring, deploy/prometheus/alerts.yml and deploy/grafana/msgpulse.json,
// so a broken rules file, a renamed metric or a dashboard query that
// returns nothing fails the build instead of silencing an alert or
// blanking a panel in production. promtool runs the rules' unit tests
// (deploy/prometheus/alerts_test.yml), and a real Prometheus (Debian's
// package, which scripts/services.sh installs) scrapes a running api and
// consumer under a small load and RabbitMQ's rabbitmq_prometheus endpoint,
// and answers every expression.
package alerting
