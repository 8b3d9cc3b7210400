package wecom

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// media reports whether format is a media message type, sent by media_id.
func media(format string) bool {
	return format == "image" || format == "file" || format == "video"
}

// card reports whether format is a textcard or news message.
func card(format string) bool { return format == "textcard" || format == "news" }

// appContent is the msgtype object of an application message.
func appContent(m provider.WeCom) any {
	switch {
	case media(m.Format):
		return map[string]string{"media_id": m.MediaID}
	case m.Format == "textcard":
		return map[string]string{"title": m.Title, "description": m.Description, "url": m.URL}
	case m.Format == "news":
		return map[string]any{"articles": []map[string]string{{"title": m.Title, "description": m.Description, "url": m.URL}}}
	}
	return map[string]string{"content": m.Content}
}

// CorpOf names the corp an application message is sent in: media ids are
// valid in their corp.
func (c *Client) CorpOf(m provider.WeCom) string {
	if a, ok := c.apps[AccountName(m)]; ok {
		return a.CorpID
	}
	return ""
}

// UploadMedia uploads a temporary media file (cgi-bin/media/upload,
// multipart field "media") for the account of m and returns its media_id,
// valid 3 days in the corp.
func (c *Client) UploadMedia(ctx context.Context, m provider.WeCom, kind, filename string, data []byte) (string, error) {
	acct, ok := c.apps[AccountName(m)]
	if !ok {
		return "", &provider.Error{Provider: Name, Class: provider.Permanent, Code: "not_configured", Message: "no WeCom application " + strconv.Quote(AccountName(m)) + " is configured"}
	}
	if !media(kind) {
		return "", &provider.Error{Provider: Name, Class: provider.Permanent, Code: "media_type", Message: "media type " + strconv.Quote(kind) + " is not image, file or video"}
	}
	if filename == "" {
		filename = kind
	}
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	part, err := w.CreateFormFile("media", filename)
	if err != nil {
		return "", err
	}
	if _, err := part.Write(data); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	for refreshed := false; ; refreshed = true {
		tok, err := acct.tokens.Token(ctx)
		if err != nil {
			return "", err
		}
		q := url.Values{"access_token": {tok}, "type": {kind}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.APIBase+"/cgi-bin/media/upload?"+q.Encode(), bytes.NewReader(body.Bytes()))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", w.FormDataContentType())
		resp, err := c.http.Do(req)
		if err != nil {
			return "", &provider.Error{Provider: Name, Class: provider.Transient, Code: "upload", Message: "media upload failed: " + err.Error()}
		}
		var a struct {
			answer
			MediaID string `json:"media_id"`
		}
		raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
		if rerr != nil || json.Unmarshal(raw, &a) != nil {
			return "", &provider.Error{Provider: Name, Class: provider.Transient, Code: "upload", Message: fmt.Sprintf("media upload answered %s without JSON", resp.Status)}
		}
		if TokenProblem(a.ErrCode) && !refreshed {
			if err := acct.tokens.Invalidate(ctx, tok); err != nil {
				return "", err
			}
			continue
		}
		if a.ErrCode != 0 {
			return "", classify(Name, a.answer)
		}
		if a.MediaID == "" {
			return "", &provider.Error{Provider: Name, Class: provider.Transient, Code: "upload", Message: "media upload answered without media_id"}
		}
		return a.MediaID, nil
	}
}
