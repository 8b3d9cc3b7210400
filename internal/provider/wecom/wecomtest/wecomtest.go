// Package wecomtest is a WeCom test server: an httptest server that checks
// what WeCom checks (corpid and secret, a valid unexpired access token, the
// agentid, touser's size, msgtype and its content, robot keys and their
// 20-a-minute limit) and answers with WeCom's real errcodes, including
// invaliduser for userids it does not know.
//
// Only tests import it. It fakes the vendor, never RabbitMQ or Redis.
package wecomtest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Test credentials.
const (
	CorpID     = "ww-test-corp"
	CorpSecret = "test-secret"
	AgentID    = 1000002
	RobotKey   = "robot-key-1"
)

// Received is one message a user or robot got.
type Received struct {
	MsgType  string
	Content  string
	Mentions []string
}

// Server is the fake. Its exported fields may be set before the first
// request; use the methods afterwards.
type Server struct {
	*httptest.Server
	// Unknown userids are answered in invaliduser.
	Unknown map[string]bool
	// TokenTTL is the expires_in of new tokens; default 7200 s.
	TokenTTL time.Duration
	// Latency is added to every answer (make bench's 50 ms).
	Latency time.Duration
	// Hold, when set, is called with each request before it is handled,
	// which waits until it returns: a test stalls an endpoint (a WeCom
	// that never answers) by waiting for the request's context to end
	// (after reading its body: a server notices a client leaving only
	// once the body is read), or holds requests until it has seen what
	// it waits for.
	Hold func(r *http.Request)

	// uploadRate is the bytes a second an upload is read at (0: as fast
	// as it comes), and uploading the uploads being read now.
	uploadRate, uploading atomic.Int64

	mu          sync.Mutex
	apps        map[string]App       // corpid + "/" + secret → application
	tokens      map[string]time.Time // token → expiry
	tokenApp    map[string]App       // token → the application it was issued to
	appFetches  map[App]int
	from        map[string][]App // user → the application of each message it got
	media       map[string]uploaded
	uploads     int
	n           int
	fetches     int
	sendCalls   int
	attempts    int
	throttle    []int // errcodes to answer the next sends with
	users       map[string][]Received
	robot       []Received
	robotTimes  []time.Time
	lastDupFlag int
	calls       [][]string // touser of each message/send call WeCom took
	issued      []string   // every access token issued
}

// New starts a server that is closed when t ends.
func New(t testing.TB) *Server {
	s := &Server{Unknown: map[string]bool{}, TokenTTL: 7200 * time.Second, tokens: map[string]time.Time{}, users: map[string][]Received{},
		apps: map[string]App{}, tokenApp: map[string]App{}, appFetches: map[App]int{}, from: map[string][]App{}, media: map[string]uploaded{}}
	s.AddApp(CorpID, CorpSecret, AgentID)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cgi-bin/gettoken", s.gettoken)
	mux.HandleFunc("POST /cgi-bin/message/send", s.send)
	mux.HandleFunc("POST /cgi-bin/webhook/send", s.webhook)
	mux.HandleFunc("POST /cgi-bin/media/upload", s.upload)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Hold != nil {
			s.Hold(r)
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) answer(w http.ResponseWriter, v map[string]any) {
	if s.Latency > 0 {
		time.Sleep(s.Latency) // the vendor's own latency, not a wait for an outcome
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(code int, msg string) map[string]any {
	return map[string]any{"errcode": code, "errmsg": msg + ", hint: [test], more info at https://open.work.weixin.qq.com/devtool/query?e=" + fmt.Sprint(code)}
}

// App is one WeCom application: WeCom issues tokens per corp and
// application secret, and a send must name the application's agentid.
type App struct {
	CorpID  string
	AgentID int64
}

// AddApp adds an application (the test credentials are one already).
func (s *Server) AddApp(corpID, secret string, agentID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apps[corpID+"/"+secret] = App{CorpID: corpID, AgentID: agentID}
}

func (s *Server) gettoken(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	known := false
	for k := range s.apps {
		if strings.HasPrefix(k, q.Get("corpid")+"/") {
			known = true
		}
	}
	app, ok := s.apps[q.Get("corpid")+"/"+q.Get("corpsecret")]
	s.mu.Unlock()
	switch {
	case !known:
		s.answer(w, fail(40013, "invalid corpid"))
		return
	case !ok:
		s.answer(w, fail(40001, "invalid credential"))
		return
	}
	s.mu.Lock()
	s.n++
	s.fetches++
	s.appFetches[app]++
	// As long and as random as WeCom's, so that a test can look for it
	// anywhere (a status, a log line) without false matches.
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := fmt.Sprintf("tok%d-%x", s.n, b)
	s.issued = append(s.issued, tok)
	s.tokens[tok] = time.Now().Add(s.TokenTTL)
	s.tokenApp[tok] = app
	ttl := s.TokenTTL
	s.mu.Unlock()
	s.answer(w, map[string]any{"errcode": 0, "errmsg": "ok", "access_token": tok, "expires_in": int(ttl / time.Second)})
}

// checkToken answers 41001, 40014 or 42001 as WeCom does, or 0.
func (s *Server) checkToken(tok string) (int, string) {
	if tok == "" {
		return 41001, "access_token missing"
	}
	exp, ok := s.tokens[tok]
	switch {
	case !ok:
		return 40014, "invalid access_token"
	case !time.Now().Before(exp):
		return 42001, "access_token expired"
	}
	return 0, ""
}

type sendBody struct {
	ToUser  string `json:"touser"`
	MsgType string `json:"msgtype"`
	AgentID int64  `json:"agentid"`
	Text    *struct {
		Content       string   `json:"content"`
		MentionedList []string `json:"mentioned_list"`
	} `json:"text"`
	Markdown *struct {
		Content string `json:"content"`
	} `json:"markdown"`
	TextCard *struct {
		Title       string `json:"title"`
		Description string `json:"description"`
		URL         string `json:"url"`
	} `json:"textcard"`
	News *struct {
		Articles []struct {
			Title       string `json:"title"`
			Description string `json:"description"`
			URL         string `json:"url"`
		} `json:"articles"`
	} `json:"news"`
	Image                  *mediaRef `json:"image"`
	File                   *mediaRef `json:"file"`
	Video                  *mediaRef `json:"video"`
	EnableDuplicateCheck   int       `json:"enable_duplicate_check"`
	DuplicateCheckInterval int       `json:"duplicate_check_interval"`
}

// content checks msgtype and its content as WeCom does.
func (b *sendBody) content() (string, []string, int, string) {
	var c string
	var mentions []string
	switch b.MsgType {
	case "text":
		if b.Text == nil {
			return "", nil, 40058, "text missing"
		}
		c, mentions = b.Text.Content, b.Text.MentionedList
	case "markdown":
		if b.Markdown == nil {
			return "", nil, 40058, "markdown missing"
		}
		c = b.Markdown.Content
	case "textcard":
		if b.TextCard == nil || b.TextCard.Title == "" || b.TextCard.Description == "" || b.TextCard.URL == "" {
			return "", nil, 40058, "textcard title, description and url required"
		}
		// Received.Content is title, description and url, a line each.
		return b.TextCard.Title + "\n" + b.TextCard.Description + "\n" + b.TextCard.URL, nil, 0, ""
	case "news":
		if b.News == nil || len(b.News.Articles) < 1 || len(b.News.Articles) > 8 || b.News.Articles[0].Title == "" || b.News.Articles[0].URL == "" {
			return "", nil, 40058, "news needs 1 to 8 articles with title and url"
		}
		a := b.News.Articles[0]
		return a.Title + "\n" + a.Description + "\n" + a.URL, nil, 0, ""
	case "image", "file", "video":
		ref := map[string]*mediaRef{"image": b.Image, "file": b.File, "video": b.Video}[b.MsgType]
		if ref == nil || ref.MediaID == "" {
			return "", nil, 40058, b.MsgType + ".media_id missing"
		}
		// The media id stands for the content: Received.Content holds it.
		return ref.MediaID, nil, 0, ""
	default:
		return "", nil, 40008, "invalid message type"
	}
	switch {
	case strings.TrimSpace(c) == "":
		return "", nil, 44004, "empty content"
	case len(c) > 4096:
		return "", nil, 45002, "content size out of limit"
	}
	return c, mentions, 0, ""
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	var b sendBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		s.answer(w, fail(47001, "data format error"))
		return
	}
	s.answer(w, s.sendReply(r, &b))
}

func (s *Server) sendReply(r *http.Request, b *sendBody) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	tok := r.URL.Query().Get("access_token")
	if code, msg := s.checkToken(tok); code != 0 {
		return fail(code, msg)
	}
	app := s.tokenApp[tok]
	s.sendCalls++
	if len(s.throttle) > 0 {
		code := s.throttle[0]
		s.throttle = s.throttle[1:]
		return fail(code, "api freq out of limit")
	}
	if b.AgentID != app.AgentID {
		return fail(40056, "invalid agentid")
	}
	users := strings.Split(b.ToUser, "|")
	if b.ToUser == "" {
		return fail(82001, "All touser & toparty & totag invalid")
	}
	if len(users) > 1000 {
		return fail(40032, "invalid userid size")
	}
	content, _, code, msg := b.content()
	if code != 0 {
		return fail(code, msg)
	}
	if m, ok := s.media[content]; (b.MsgType == "image" || b.MsgType == "file" || b.MsgType == "video") && (!ok || m.kind != b.MsgType || m.corp != app.CorpID) {
		return fail(40007, "invalid media_id")
	}
	s.lastDupFlag = b.EnableDuplicateCheck
	var invalid []string
	for _, u := range users {
		if s.Unknown[u] {
			invalid = append(invalid, u)
			continue
		}
		s.users[u] = append(s.users[u], Received{MsgType: b.MsgType, Content: content})
		s.from[u] = append(s.from[u], app)
	}
	s.calls = append(s.calls, users)
	if len(invalid) == len(users) {
		return map[string]any{"errcode": 81013, "errmsg": "user & party & tag all invalid", "invaliduser": strings.Join(invalid, "|")}
	}
	return map[string]any{"errcode": 0, "errmsg": "ok", "invaliduser": strings.Join(invalid, "|"), "msgid": fmt.Sprintf("msg-%d", s.sendCalls)}
}

func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	var b sendBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		s.answer(w, fail(47001, "data format error"))
		return
	}
	s.answer(w, s.webhookReply(r, &b))
}

func (s *Server) webhookReply(r *http.Request, b *sendBody) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Query().Get("key") != RobotKey {
		return fail(93000, "invalid webhook url")
	}
	now := time.Now()
	recent := s.robotTimes[:0]
	for _, t := range s.robotTimes {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	s.robotTimes = recent
	if len(recent) >= 20 {
		return fail(45009, "api freq out of limit")
	}
	content, mentions, code, msg := b.content()
	if code != 0 {
		return fail(code, msg)
	}
	s.robotTimes = append(s.robotTimes, now)
	s.robot = append(s.robot, Received{MsgType: b.MsgType, Content: content, Mentions: mentions})
	return map[string]any{"errcode": 0, "errmsg": "ok"}
}

// ExpireTokens makes every token issued so far expired, as WeCom may do
// before expires_in has passed.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.tokens {
		s.tokens[t] = time.Now().Add(-time.Second)
	}
}

// Throttle makes the next sends answer these errcodes (e.g. 45009).
func (s *Server) Throttle(codes ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle = append(s.throttle, codes...)
}

// TokenFetches counts successful gettoken calls.
func (s *Server) TokenFetches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

// SendCalls counts message/send calls that carried a valid token.
func (s *Server) SendCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendCalls
}

// SendAttempts counts every message/send call, refused tokens included.
func (s *Server) SendAttempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// ReceivedBy returns what a user got.
func (s *Server) ReceivedBy(user string) []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.users[user]...)
}

// Users counts the users that got at least one message.
func (s *Server) Users() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.users)
}

// RobotPosts returns what the robot got.
func (s *Server) RobotPosts() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.robot...)
}

// DuplicateCheck reports the last send's enable_duplicate_check.
func (s *Server) DuplicateCheck() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastDupFlag
}

// TokenFetchesOf counts successful gettoken calls of one application.
func (s *Server) TokenFetchesOf(corpID string, agentID int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appFetches[App{CorpID: corpID, AgentID: agentID}]
}

// From returns the application each message a user got came from.
func (s *Server) From(user string) []App {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]App(nil), s.from[user]...)
}

type mediaRef struct {
	MediaID string `json:"media_id"`
}

type uploaded struct {
	kind, corp, filename string
	size                 int
}

// WeCom's temporary media limits.
var mediaMax = map[string]int{"image": 10 << 20, "video": 10 << 20, "file": 20 << 20, "voice": 2 << 20}

// upload is cgi-bin/media/upload: a multipart body whose file is the field
// "media", of a known type, between 5 bytes and the type's limit.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	s.uploading.Add(1)
	defer s.uploading.Add(-1)
	r.Body = &slowBody{ReadCloser: r.Body, ctx: r.Context(), rate: &s.uploadRate}
	s.answer(w, s.uploadReply(r))
}

// SetUploadRate makes uploads read at most bytesPerSecond from now on,
// those under way too (0: as fast as they come): a WeCom slower than a
// tenant's file server.
func (s *Server) SetUploadRate(bytesPerSecond int64) { s.uploadRate.Store(bytesPerSecond) }

// Uploading is how many uploads are being read now.
func (s *Server) Uploading() int { return int(s.uploading.Load()) }

// slowBody reads an upload at the server's upload rate, in slices of a
// tenth of a second's worth, until the client leaves.
type slowBody struct {
	io.ReadCloser
	ctx  context.Context
	rate *atomic.Int64
}

func (b *slowBody) Read(p []byte) (int, error) {
	rate := b.rate.Load()
	if rate <= 0 {
		return b.ReadCloser.Read(p)
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), int(max(rate/10, 1)))])
	select { // the vendor's pace, not a wait for an outcome
	case <-b.ctx.Done():
		return n, b.ctx.Err()
	case <-time.After(time.Duration(n) * time.Second / time.Duration(rate)):
	}
	return n, err
}

func (s *Server) uploadReply(r *http.Request) map[string]any {
	s.mu.Lock()
	code, msg := s.checkToken(r.URL.Query().Get("access_token"))
	app := s.tokenApp[r.URL.Query().Get("access_token")]
	s.mu.Unlock()
	if code != 0 {
		return fail(code, msg)
	}
	kind := r.URL.Query().Get("type")
	limit, ok := mediaMax[kind]
	if !ok {
		return fail(40004, "invalid media type")
	}
	// WeCom refuses a file over 20 MB; the fake reads at most a little
	// more, so a test sending a huge one cannot exhaust its memory. It
	// counts the file's bytes as they stream by, keeping none: a test of
	// many large uploads measures the consumer, not the fake.
	r.Body = http.MaxBytesReader(nil, r.Body, 32<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		return fail(44001, "empty media data")
	}
	var filename string
	n := -1
	for n < 0 {
		part, err := mr.NextPart()
		if err != nil {
			return fail(41005, "media data missing")
		}
		if part.FormName() != "media" || part.FileName() == "" {
			continue
		}
		size, err := io.Copy(io.Discard, part)
		if err != nil {
			return fail(44001, "empty media data")
		}
		filename, n = part.FileName(), int(size)
	}
	switch {
	case n < 5:
		return fail(44001, "empty media data")
	case n > limit:
		return fail(40006, "invalid media size")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uploads++
	id := fmt.Sprintf("media-%d", s.uploads)
	s.media[id] = uploaded{kind: kind, corp: app.CorpID, filename: filename, size: n}
	return map[string]any{"errcode": 0, "errmsg": "ok", "type": kind, "media_id": id, "created_at": fmt.Sprint(time.Now().Unix())}
}

// Uploads counts successful media uploads.
func (s *Server) Uploads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uploads
}

// Uploaded returns the file name and size of an uploaded media id.
func (s *Server) Uploaded(mediaID string) (filename string, size int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.media[mediaID]
	return m.filename, m.size, ok
}

// Calls returns the userids of each message/send call WeCom took (a valid
// token, a well-formed request), in order.
func (s *Server) Calls() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]string, len(s.calls))
	for i, c := range s.calls {
		out[i] = append([]string(nil), c...)
	}
	return out
}

// Tokens returns every access token the server issued.
func (s *Server) Tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.issued...)
}
