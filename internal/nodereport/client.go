package nodereport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Client reads, watches and patches Nodes with plain HTTPS requests (no
// Kubernetes client library: the VFIO manager's image stays small).
type Client struct {
	// Base is the API server's URL.
	Base *url.URL
	// HTTP sends the requests. It must have no overall timeout: a watch
	// lasts minutes (each request is bounded by its context instead).
	HTTP *http.Client
	// Token returns the bearer token of a request; nil sends none (HTTP
	// authenticates by a client certificate).
	Token func() (string, error)
	// Timeout bounds a GET or a PATCH (default 10s).
	Timeout time.Duration
}

// Client returns a client of s: its CA, and the token read from its file at
// each request (the kubelet rotates bound tokens).
func (s Server) Client() (*Client, error) {
	base, err := url.Parse(s.URL)
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("API server %q: want an https:// URL", s.URL)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CA) {
		return nil, fmt.Errorf("API server %s: no certificate in its CA", s.URL)
	}
	hc := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Proxy:           http.ProxyFromEnvironment,
	}}
	token := func() (string, error) {
		b, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return "", fmt.Errorf("token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return &Client{Base: base, HTTP: hc, Token: token, Timeout: s.Timeout}, nil
}

// NodeMeta is what a watcher needs of a Node.
type NodeMeta struct {
	Name            string            `json:"name"`
	ResourceVersion string            `json:"resourceVersion"`
	Annotations     map[string]string `json:"annotations"`
}

type nodeObject struct {
	Metadata NodeMeta `json:"metadata"`
}

// StatusError is an API server's refusal: its HTTP status code and answer.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Body)
}

func validNode(node string) error {
	if node == "" || strings.ContainsAny(node, "/?#%") {
		return fmt.Errorf("node name %q is not valid", node)
	}
	return nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 10 * time.Second
	}
	return c.Timeout
}

// do sends one request and returns the response when it is a success; the
// caller closes its body.
func (c *Client) do(ctx context.Context, method string, u *url.URL, body []byte, ctype string) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != nil {
		token, err := c.Token()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	return resp, nil
}

// PatchNode sends a JSON merge patch of the node.
func (c *Client) PatchNode(ctx context.Context, node string, patch []byte) error {
	if err := validNode(node); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	resp, err := c.do(ctx, http.MethodPatch, c.Base.JoinPath("api", "v1", "nodes", node), patch, "application/merge-patch+json")
	if err != nil {
		return fmt.Errorf("node %s: patch: %w", node, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.Body.Close()
}

// GetNode reads the node's metadata.
func (c *Client) GetNode(ctx context.Context, node string) (NodeMeta, error) {
	if err := validNode(node); err != nil {
		return NodeMeta{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, c.Base.JoinPath("api", "v1", "nodes", node), nil, "")
	if err != nil {
		return NodeMeta{}, fmt.Errorf("node %s: get: %w", node, err)
	}
	defer resp.Body.Close()
	var obj nodeObject
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&obj); err != nil {
		return NodeMeta{}, fmt.Errorf("node %s: get: %w", node, err)
	}
	return obj.Metadata, nil
}

// ErrExpired is a watch whose resource version is too old (410 Gone): read
// the Node again and watch from there.
var ErrExpired = errors.New("resource version expired")

// WatchNode watches the node from resourceVersion, calling fn with its
// metadata at every change (bookmarks only move the version), until the
// server ends the watch (after about timeout), ctx ends or an error. It
// returns the last resource version seen.
func (c *Client) WatchNode(ctx context.Context, node, resourceVersion string, timeout time.Duration, fn func(NodeMeta)) (string, error) {
	if err := validNode(node); err != nil {
		return resourceVersion, err
	}
	u := c.Base.JoinPath("api", "v1", "nodes")
	q := url.Values{}
	q.Set("watch", "true")
	q.Set("fieldSelector", "metadata.name="+node)
	q.Set("resourceVersion", resourceVersion)
	q.Set("allowWatchBookmarks", "true")
	q.Set("timeoutSeconds", strconv.Itoa(int(timeout.Seconds())))
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, timeout+c.timeout())
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, u, nil, "")
	if err != nil {
		return resourceVersion, fmt.Errorf("node %s: watch: %w", node, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return resourceVersion, nil // the watch ended
			}
			return resourceVersion, fmt.Errorf("node %s: watch: %w", node, err)
		}
		switch ev.Type {
		case "ERROR":
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(ev.Object, &st)
			if st.Code == http.StatusGone {
				return resourceVersion, fmt.Errorf("node %s: watch: %w: %s", node, ErrExpired, st.Message)
			}
			return resourceVersion, fmt.Errorf("node %s: watch: %d: %s", node, st.Code, st.Message)
		case "ADDED", "MODIFIED", "BOOKMARK":
			var obj nodeObject
			if err := json.Unmarshal(ev.Object, &obj); err != nil {
				return resourceVersion, fmt.Errorf("node %s: watch: %s: %w", node, ev.Type, err)
			}
			if obj.Metadata.ResourceVersion != "" {
				resourceVersion = obj.Metadata.ResourceVersion
			}
			if ev.Type != "BOOKMARK" {
				fn(obj.Metadata)
			}
		}
	}
}
