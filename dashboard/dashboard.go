// Package dashboard serves the operator dashboard: a page of plain ES modules and CSS, embedded
// in the binary, that calls the broker's public HTTP API like any other client. There is no
// build step: the files under assets/ are served as written.
//
// Caching: index.html is never cached, and it names the assets under a version derived from
// their content (/assets/<version>/app.js). Relative imports between the modules resolve under
// the same version, so every asset of a version is immutable and a browser holding an old
// index.html can never mix two versions.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/valyala/fasthttp"
)

//go:embed index.html assets
var files embed.FS

// version names the current assets: a hash of their names and contents.
var version = assetsVersion()

// index is index.html with the version filled in.
var index = bytes.ReplaceAll(mustRead("index.html"), []byte("{{version}}"), []byte(version))

func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("dashboard: " + err.Error()) // embedded at build time: cannot happen
	}
	return b
}

func assetsVersion() string {
	var names []string
	err := fs.WalkDir(files, "assets", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		panic("dashboard: " + err.Error())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(mustRead(n))
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Index serves the dashboard page; the router also answers every other GET that matches no
// route with it, so a reload on any page of the dashboard works.
func Index(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(index)
}

var contentTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml",
}

// Asset serves /assets/{file}: immutable under the current version, revalidated otherwise (an
// unversioned path, or a version this broker does not have, gets today's file).
func Asset(ctx *fasthttp.RequestCtx) {
	file, _ := ctx.UserValue("file").(string)
	cache := "no-cache"
	if rest, ok := strings.CutPrefix(file, version+"/"); ok {
		file, cache = rest, "public, max-age=31536000, immutable"
	} else if first, rest, ok := strings.Cut(file, "/"); ok && len(first) == len(version) {
		file = rest
	}
	body, err := files.ReadFile("assets/" + path.Clean(file))
	ctype, known := contentTypes[path.Ext(file)]
	if err != nil || !known {
		ctx.SetContentType("application/json")
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString(`{"error":"Not Found","code":"no_such_asset"}`)
		return
	}
	ctx.Response.Header.Set("Cache-Control", cache)
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.SetContentType(ctype)
	ctx.SetBody(body)
}
