package smshook

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
)

// The vendors' names (sms.NameAliyun, sms.NameTencent): the lookup's
// vendor keys.
const (
	vendorAliyun  = "aliyun"
	vendorTencent = "tencent"
)

// chinaTime is the zone of Aliyun's and Tencent's report times ("2017-01-01
// 00:00:00", Beijing time); a fixed zone, so no tzdata is needed.
var chinaTime = time.FixedZone("CST", 8*60*60)

const reportLayout = "2006-01-02 15:04:05"

// reportTime reads a vendor's report time; zero when it cannot, or when
// it is later than now (a clock ahead: the receipt is dated when applied).
func reportTime(v string, now time.Time) time.Time {
	t, err := time.ParseInLocation(reportLayout, strings.TrimSpace(v), chinaTime)
	if err != nil || t.After(now) {
		return time.Time{}
	}
	return t.UTC()
}

// readArray reads a push's JSON array of reports, bounded in bytes and in
// length.
func readArray[T any](c *echo.Context) ([]T, int) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, maxPushBody))
	if err != nil {
		return nil, http.StatusRequestEntityTooLarge
	}
	var raw []json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		return nil, http.StatusBadRequest
	}
	if len(raw) > maxReports {
		return nil, http.StatusRequestEntityTooLarge
	}
	out := make([]T, 0, len(raw))
	for _, r := range raw {
		var v T
		if json.Unmarshal(r, &v) != nil {
			return nil, http.StatusBadRequest
		}
		out = append(out, v)
	}
	return out, 0
}

// aliyunReport is one report of Aliyun's SmsReport push.
// https://help.aliyun.com/zh/sms/developer-reference/smsreport-2
type aliyunReport struct {
	PhoneNumber string `json:"phone_number"`
	SendTime    string `json:"send_time"`
	ReportTime  string `json:"report_time"`
	Success     bool   `json:"success"`
	ErrCode     string `json:"err_code"`
	ErrMsg      string `json:"err_msg"`
	SmsSize     string `json:"sms_size"`
	BizID       string `json:"biz_id"`
	OutID       string `json:"out_id"`
}

// aliyun is Aliyun's SmsReport HTTP push: a JSON array; answered
// {"code":0} once applied (Aliyun retries anything but a 200, three
// times, 1, 5 and 10 minutes apart).
func (h *Hooks) aliyun(c *echo.Context) error {
	return push(h, c, vendorAliyun, func(rep aliyunReport) (report, bool) {
		r := receipt.Receipt{Kind: receipt.Undelivered, Code: rep.ErrCode, Detail: rep.ErrMsg, At: reportTime(rep.ReportTime, h.now())}
		if rep.Success {
			r.Kind, r.Detail = receipt.Delivered, ""
		}
		return report{r, rep.BizID, aliyunNumber(rep.PhoneNumber)}, true
	}, map[string]any{"code": 0, "msg": "接收成功"}, map[string]any{"code": 1, "msg": "retry"})
}

// report is one vendor report, read: its receipt, the vendor's id of the
// message, and how its number is matched to the message's.
type report struct {
	r     receipt.Receipt
	id    string
	match func(smslookup.Entry) (string, bool)
}

// push serves a vendor's push of a JSON array of reports: each one read
// (false: a report of no outcome, counted unmatched) is applied, and the
// vendor is answered ok once all were, or retry (503) when a store
// failed, so that it pushes them again.
func push[T any](h *Hooks, c *echo.Context, vendor string, read func(T) (report, bool), ok, retry any) error {
	reports, status := readArray[T](c)
	if status != 0 {
		return c.NoContent(status)
	}
	ctx := c.Request().Context()
	var o outcome
	for _, rep := range reports {
		if r, use := read(rep); use {
			h.apply(ctx, &o, vendor, r.id, r.match, r.r)
		} else {
			o.unmatched++
		}
	}
	h.done(vendor, o)
	if o.err != nil {
		return c.JSON(http.StatusServiceUnavailable, retry)
	}
	return c.JSON(http.StatusOK, ok)
}

// aliyunNumber matches Aliyun's phone_number to the message's number:
// Aliyun reports it as it was sent (sms.aliyunPhone: the national number
// in mainland China, country code and number without "+" elsewhere), or
// with "+" or "00". The report's number, in E.164, is the message's when
// one of its forms is.
func aliyunNumber(reported string) func(smslookup.Entry) (string, bool) {
	return func(e smslookup.Entry) (string, bool) {
		p := strings.TrimSpace(reported)
		digits := strings.TrimPrefix(strings.TrimPrefix(p, "+"), "00")
		forms := []string{"+" + digits}
		if n, ok := strings.CutPrefix(e.Recipient, "+86"); ok && p == n {
			forms = append(forms, e.Recipient)
		}
		for _, f := range forms {
			if n := normalise(f); n != "" && n == e.Recipient {
				return n, true
			}
		}
		return normalise(forms[0]), false
	}
}

// normalise is a number in E.164 as the API keys it, or "".
func normalise(s string) string {
	n, err := phone.Parse(s)
	if err != nil {
		return ""
	}
	return n.E164
}

// tencentReport is one report of Tencent Cloud SMS's status callback.
// https://www.tencentcloud.com/document/product/382/43547
type tencentReport struct {
	UserReceiveTime string `json:"user_receive_time"`
	NationCode      string `json:"nationcode"`
	Mobile          string `json:"mobile"`
	ReportStatus    string `json:"report_status"`
	ErrMsg          string `json:"errmsg"`
	Description     string `json:"description"`
	SID             string `json:"sid"`
}

// tencent is Tencent's status callback: a JSON array; answered
// {"result":0,"errmsg":"OK"} once applied.
func (h *Hooks) tencent(c *echo.Context) error {
	return push(h, c, vendorTencent, func(rep tencentReport) (report, bool) {
		r := receipt.Receipt{Code: rep.ErrMsg, Detail: rep.Description, At: reportTime(rep.UserReceiveTime, h.now())}
		switch strings.ToUpper(rep.ReportStatus) {
		case "SUCCESS":
			r.Kind, r.Detail = receipt.Delivered, ""
		case "FAIL":
			r.Kind = receipt.Undelivered
		default:
			return report{}, false
		}
		return report{r, rep.SID, tencentNumber(rep.NationCode, rep.Mobile)}, true
	}, map[string]any{"result": 0, "errmsg": "OK"}, map[string]any{"result": 1, "errmsg": "retry"})
}

// tencentNumber matches Tencent's nationcode and mobile (or a mobile
// already in E.164) to the message's number.
func tencentNumber(nation, mobile string) func(smslookup.Entry) (string, bool) {
	return func(e smslookup.Entry) (string, bool) {
		m := strings.TrimSpace(mobile)
		if !strings.HasPrefix(m, "+") {
			m = "+" + strings.TrimPrefix(strings.TrimSpace(nation), "+") + m
		}
		n := normalise(m)
		return n, n != "" && n == e.Recipient
	}
}
