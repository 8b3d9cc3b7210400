package wecom

import (
	"bytes"
	"context"
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

// UploadMedia uploads a temporary media file (cgi-bin/media/upload,
// multipart field "media") of size bytes, read from open (called once per
// attempt), for acct and returns its media_id, valid 3 days in acct's
// corp. ctx bounds it (the caller gives the upload its own time, apart
// from the download's). Like every call, its failures come back
// classified and without the request URL, which holds the token.
//
// The body is streamed: the part's header, the file as open reads it, the
// closing boundary, with its exact Content-Length. A body built in a
// buffer was a second full copy of each file (up to 20 MB) for as long as
// the upload took (issue 43).
func (c *Client) UploadMedia(ctx context.Context, acct *App, kind, filename string, size int64, open func() io.Reader) (string, error) {
	if !media(kind) {
		return "", &provider.Error{Provider: Name, Class: provider.Permanent, Code: "media_type", Message: "media type " + strconv.Quote(kind) + " is not image, file or video"}
	}
	if filename == "" {
		filename = kind
	}
	head, tail, contentType, err := multipartFrame(filename)
	if err != nil {
		return "", err
	}
	body := func() io.Reader { return io.MultiReader(bytes.NewReader(head), open(), bytes.NewReader(tail)) }
	for refreshed := false; ; refreshed = true {
		tok, err := acct.tokens.Token(ctx)
		if err != nil {
			return "", err
		}
		q := url.Values{"access_token": {tok}, "type": {kind}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.APIBase+"/cgi-bin/media/upload?"+q.Encode(), body())
		if err != nil {
			return "", err
		}
		req.ContentLength = int64(len(head)) + size + int64(len(tail))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(body()), nil }
		req.Header.Set("Content-Type", contentType)
		a, err := c.callWith(c.upload, req, Name)
		if err != nil {
			return "", err
		}
		if TokenProblem(a.ErrCode) && !refreshed {
			if err := acct.tokens.Invalidate(ctx, tok); err != nil {
				return "", err
			}
			continue
		}
		if a.ErrCode != 0 {
			return "", classify(Name, a)
		}
		if a.MediaID == "" {
			return "", &provider.Error{Provider: Name, Class: provider.Transient, Code: "upload", Message: "media upload answered without media_id"}
		}
		return a.MediaID, nil
	}
}

// multipartFrame is what goes around a file of a one-part multipart body
// (field "media"): the part's boundary and headers, then the closing
// boundary, and the body's Content-Type.
func multipartFrame(filename string) (head, tail []byte, contentType string, err error) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if _, err := w.CreateFormFile("media", filename); err != nil {
		return nil, nil, "", err
	}
	head = bytes.Clone(b.Bytes())
	b.Reset()
	if err := w.Close(); err != nil {
		return nil, nil, "", err
	}
	return head, b.Bytes(), w.FormDataContentType(), nil
}
