// Package examplehelper is a small provisioning helper for the demo fleet and the tests: it reads
// the Choria Provisioner helper contract's input on stdin and prints a configuration that turns a
// server in Organization Issuer (ed25519) mode into a normal fleet member.
package examplehelper

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
)

// Options are the site facts the helper needs.
type Options struct {
	BrokerURL    string
	IssuerPublic string
	LogLevel     string
}

type input struct {
	Identity      string `json:"identity"`
	ED25519PubKey *struct {
		PublicKey string `json:"public_key"`
		Directory string `json:"directory"`
	} `json:"ed25519_pubkey"`
	Inventory string `json:"inventory"`
}

// Run reads one request from in and writes one reply to out.
func Run(o Options, in io.Reader, out io.Writer) error {
	var req input
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return fmt.Errorf("decoding request: %w", err)
	}
	reply := map[string]any{"defer": false, "msg": ""}
	if req.ED25519PubKey == nil || req.ED25519PubKey.Directory == "" {
		reply["defer"] = true
		reply["msg"] = "no ed25519 key directory in the request: enable features.ed25519"
		return json.NewEncoder(out).Encode(reply)
	}
	dir := req.ED25519PubKey.Directory
	level := o.LogLevel
	if level == "" {
		level = "info"
	}
	reply["msg"] = "configured by the example helper"
	reply["configuration"] = map[string]string{
		"identity":                             req.Identity,
		"loglevel":                             level,
		"logfile":                              filepath.Join(dir, "server.log"),
		"plugin.choria.server.provision":       "false",
		"plugin.choria.middleware_hosts":       o.BrokerURL,
		"plugin.choria.use_srv":                "false",
		"collectives":                          "choria",
		"main_collective":                      "choria",
		"rpcauthorization":                     "0",
		"plugin.security.provider":             "choria",
		"plugin.security.issuer.names":         "choria",
		"plugin.security.issuer.choria.public": o.IssuerPublic,
		"plugin.security.choria.token_file":    filepath.Join(dir, "server.jwt"),
		"plugin.security.choria.seed_file":     filepath.Join(dir, "server.seed"),
		"plugin.choria.status_file_path":       filepath.Join(dir, "status.json"),
	}
	reply["server_claims"] = map[string]any{"collectives": []string{"choria"}}
	return json.NewEncoder(out).Encode(reply)
}
