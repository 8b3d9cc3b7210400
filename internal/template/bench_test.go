package template

import "testing"

// What the consumer spends rendering one message, per channel: the
// verification-code mail (HTML and text parts, escaping) and SMS.
func BenchmarkRender(b *testing.B) {
	s, err := Load("", "en")
	if err != nil {
		b.Fatal(err)
	}
	vars := map[string]string{"code": "123456", "ttlMinutes": "10"}
	for _, bc := range []struct {
		name   string
		render func() error
	}{
		{"email/verify_code", func() error { _, err := s.RenderEmail("verify_code", "en", vars); return err }},
		{"email/verify_code/zh-CN", func() error { _, err := s.RenderEmail("verify_code", "zh-CN", vars); return err }},
		{"sms/verify_code", func() error { _, err := s.RenderSMS("verify_code", "en", vars); return err }},
		{"email/notice", func() error {
			_, err := s.RenderEmail("notice", "en", map[string]string{"title": "Your order shipped", "content": "It arrives <b>tomorrow</b> & not later."})
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.render(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
