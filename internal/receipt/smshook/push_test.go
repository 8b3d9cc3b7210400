package smshook_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt"
)

// aliyunPush is one report as Aliyun's SmsReport push sends it.
func aliyunPush(phone, bizID string, success bool, code, msg string) string {
	return fmt.Sprintf(`{"phone_number":%q,"send_time":"2026-11-29 19:57:58","report_time":"2026-11-29 19:58:03","success":%t,"err_code":%q,"err_msg":%q,"sms_size":"1","biz_id":%q,"out_id":""}`,
		phone, success, code, msg, bizID)
}

// tencentPush is one report as Tencent's status callback sends it.
func tencentPush(nation, mobile, sid, status, errmsg string) string {
	return fmt.Sprintf(`{"user_receive_time":"2026-11-29 19:58:03","nationcode":%q,"mobile":%q,"report_status":%q,"errmsg":%q,"description":"用户短信送达成功","sid":%q}`,
		nation, mobile, status, errmsg, sid)
}

func TestAliyunAndTencentPushes(t *testing.T) {
	at := time.Date(2026, 11, 29, 11, 58, 3, 0, time.UTC) // 19:58:03 Beijing time
	const aliBiz, aliBizUS, tcSID = "900619767661^4112412416219", "900619767661^4112412416220", "2019:6512963862795239"
	aliOK, tcOK := `{"code":0,"msg":"接收成功"}`, `{"errmsg":"OK","result":0}`
	for _, tc := range []struct {
		name   string
		path   string
		body   string
		status int
		reply  string
		want   []receipt.Receipt
	}{
		{name: "aliyun delivered, mainland number in its national form", path: "/hooks/sms/aliyun/" + aliyunToken,
			body: "[" + aliyunPush("13900001234", aliBiz, true, "DELIVERED", "用户接收成功") + "]", status: 200, reply: aliOK,
			want: []receipt.Receipt{{TaskID: "task-ali", Channel: "sms", Kind: receipt.Delivered, Code: "DELIVERED", At: at, Source: "aliyun", Recipient: number}}},
		{name: "aliyun undelivered names err_code", path: "/hooks/sms/aliyun/" + aliyunToken,
			body: "[" + aliyunPush("13900001234", aliBiz, false, "MK:0001", "空号") + "]", status: 200, reply: aliOK,
			want: []receipt.Receipt{{TaskID: "task-ali", Channel: "sms", Kind: receipt.Undelivered, Code: "MK:0001", Detail: "空号", At: at, Source: "aliyun", Recipient: number}}},
		{name: "aliyun, an international number with its country code", path: "/hooks/sms/aliyun/" + aliyunToken,
			body: "[" + aliyunPush("14155550100", aliBizUS, true, "DELIVERED", "") + "]", status: 200, reply: aliOK,
			want: []receipt.Receipt{{TaskID: "task-ali-us", Channel: "sms", Kind: receipt.Delivered, Code: "DELIVERED", At: at, Source: "aliyun", Recipient: usNumber}}},
		{name: "aliyun, several reports, one for an unknown biz_id and one for another number", path: "/hooks/sms/aliyun/" + aliyunToken,
			body: "[" + aliyunPush("13900009999", aliBiz, true, "DELIVERED", "") + "," + aliyunPush("13900001234", "1^1", true, "DELIVERED", "") + "," +
				aliyunPush("13900001234", aliBiz, true, "DELIVERED", "") + "]", status: 200, reply: aliOK,
			want: []receipt.Receipt{{TaskID: "task-ali", Channel: "sms", Kind: receipt.Delivered, Code: "DELIVERED", At: at, Source: "aliyun", Recipient: number}}},
		{name: "aliyun, unknown biz_id only: answered, not applied", path: "/hooks/sms/aliyun/" + aliyunToken,
			body: "[" + aliyunPush("13900001234", "404^404", true, "DELIVERED", "") + "]", status: 200, reply: aliOK},
		{name: "aliyun, another vendor's id: not applied", path: "/hooks/sms/aliyun/" + aliyunToken,
			body: "[" + aliyunPush("13900001234", tcSID, true, "DELIVERED", "") + "]", status: 200, reply: aliOK},
		{name: "aliyun wrong token: 403", path: "/hooks/sms/aliyun/" + aliyunToken + "x",
			body: "[" + aliyunPush("13900001234", aliBiz, true, "DELIVERED", "") + "]", status: 403},
		{name: "aliyun, tencent's token: 403", path: "/hooks/sms/aliyun/" + tencentToken,
			body: "[" + aliyunPush("13900001234", aliBiz, true, "DELIVERED", "") + "]", status: 403},
		{name: "aliyun, not an array: 400", path: "/hooks/sms/aliyun/" + aliyunToken, body: aliyunPush("13900001234", aliBiz, true, "DELIVERED", ""), status: 400},
		{name: "aliyun, too many reports: 413", path: "/hooks/sms/aliyun/" + aliyunToken, body: "[" + strings.Repeat("{},", 1000) + "{}]", status: 413},
		{name: "aliyun, too large a body: 413", path: "/hooks/sms/aliyun/" + aliyunToken, body: `["` + strings.Repeat("x", 1<<20) + `"]`, status: 413},
		{name: "tencent delivered", path: "/hooks/sms/tencent/" + tencentToken,
			body: "[" + tencentPush("86", "13900001234", tcSID, "SUCCESS", "DELIVRD") + "]", status: 200, reply: tcOK,
			want: []receipt.Receipt{{TaskID: "task-tc", Channel: "sms", Kind: receipt.Delivered, Code: "DELIVRD", At: at, Source: "tencent", Recipient: number}}},
		{name: "tencent failed names errmsg", path: "/hooks/sms/tencent/" + tencentToken,
			body: "[" + tencentPush("86", "13900001234", tcSID, "FAIL", "MN:0001") + "]", status: 200, reply: tcOK,
			want: []receipt.Receipt{{TaskID: "task-tc", Channel: "sms", Kind: receipt.Undelivered, Code: "MN:0001", Detail: "用户短信送达成功", At: at, Source: "tencent", Recipient: number}}},
		{name: "tencent, mobile already in E.164", path: "/hooks/sms/tencent/" + tencentToken,
			body: "[" + tencentPush("86", "+8613900001234", tcSID, "SUCCESS", "DELIVRD") + "]", status: 200, reply: tcOK,
			want: []receipt.Receipt{{TaskID: "task-tc", Channel: "sms", Kind: receipt.Delivered, Code: "DELIVRD", At: at, Source: "tencent", Recipient: number}}},
		{name: "tencent, another number: not applied", path: "/hooks/sms/tencent/" + tencentToken,
			body: "[" + tencentPush("852", "13900001234", tcSID, "SUCCESS", "DELIVRD") + "]", status: 200, reply: tcOK},
		{name: "tencent, unknown sid: not applied", path: "/hooks/sms/tencent/" + tencentToken,
			body: "[" + tencentPush("86", "13900001234", "2019:1", "SUCCESS", "DELIVRD") + "]", status: 200, reply: tcOK},
		{name: "tencent wrong token: 403", path: "/hooks/sms/tencent/wrong-token-0123456789",
			body: "[" + tencentPush("86", "13900001234", tcSID, "SUCCESS", "DELIVRD") + "]", status: 403},
		{name: "tencent, empty token: 404 or 403, never applied", path: "/hooks/sms/tencent/",
			body: "[" + tencentPush("86", "13900001234", tcSID, "SUCCESS", "DELIVRD") + "]", status: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, opts{})
			status, body := post(t, e.url+tc.path, "application/json", tc.body, nil)
			if tc.status == -1 {
				require.Contains(t, []int{http.StatusNotFound, http.StatusForbidden}, status)
			} else {
				require.Equal(t, tc.status, status, body)
			}
			if tc.reply != "" {
				require.JSONEq(t, tc.reply, body)
			}
			require.Equal(t, tc.want, e.applier.receipts())
		})
	}
}

// A method but POST is 405, and says nothing of the path.
func TestHooksTakePOSTOnly(t *testing.T) {
	e := setup(t, opts{})
	req, err := http.NewRequest(http.MethodGet, e.url+"/hooks/sms/aliyun/"+aliyunToken, nil) //nolint:noctx // a test's one request
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}
