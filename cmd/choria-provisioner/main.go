// Command choria-provisioner provisions Choria Servers through Temporal workflows. It is the
// product binary: the dev stack, simulator and benchmark live in choria-provisioner-dev.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/choria-io/fisk"
)

// version and commit are set at build time (the Makefile: -ldflags "-X main.version=... -X
// main.commit=...", from scripts/version.sh and git); the packages carry the same version.
var (
	version = "development"
	commit  = ""
)

// defaultConfig is where the packages install the configuration: every command that reads it
// defaults to this file, as the Choria Provisioner's unit does.
const defaultConfig = "/etc/choria-provisioner/choria-provisioner.yaml"

// configFlag declares a command's --config, defaulting to defaultConfig; help says what of the
// file the command uses.
func configFlag(cmd *fisk.CmdClause, help string, to *string) {
	cmd.Flag("config", help).Default(defaultConfig).StringVar(to)
}

// versionString is what --version prints: the version, the commit it was built from and the Go
// toolchain. Without the ldflags (go build, go install) the commit comes from the VCS stamp Go
// embeds, when the build had one.
func versionString() string {
	c := commit
	if c == "" {
		c = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			var rev, modified string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if rev != "" {
				c = rev
				if modified == "true" {
					c += "-dirty"
				}
			}
		}
	}
	return fmt.Sprintf("%s (commit %s, %s %s/%s)", version, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// command is one subcommand: it declares its flags, then runs when chosen.
type command interface {
	register(app *fisk.Application)
	run(ctx context.Context) error
}

func main() {
	app := fisk.New("choria-provisioner", "Provisions Choria Servers, one durable Temporal workflow per host")
	app.Version(versionString())

	hosts := &hostsCommand{}
	hosts.register(app)
	commands := map[string]command{
		"run":          &runCommand{},
		"setup":        &setupCommand{},
		"codec-server": &codecServerCommand{},
		"check":        &checkCommand{},
		"audit":        &auditCommand{},
	}
	// registration order is the help's order
	for _, name := range []string{"run", "setup", "check", "audit", "codec-server"} {
		commands[name].register(app)
	}

	cmd := app.MustParseWithUsage(os.Args[1:])

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if strings.HasPrefix(cmd, "hosts ") {
		os.Exit(hosts.run(ctx, cmd))
	}
	if err := commands[cmd].run(ctx); err != nil {
		if errors.Is(err, errChecksFailed) {
			os.Exit(1) // the report said what failed
		}
		fmt.Fprintf(os.Stderr, "choria-provisioner %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
