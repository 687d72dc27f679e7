package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/internal/preflight"
)

// servicePath is the PATH systemd gives a system service; the helper is looked up on it.
const servicePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"

// errChecksFailed makes main exit 1 without printing more than the report did.
var errChecksFailed = errors.New("checks failed")

// checkCommand is the preflight: `check --config FILE [--choria-config FILE]`. Run as root, it
// runs the checks again as the service user (the installed unit's User=, else
// choria-provisioner), so that "readable" means readable by the service; the unit's sandbox
// (ProtectHome, PrivateTmp, ProtectSystem=strict and drop-ins) is applied on top.
type checkCommand struct {
	config       string
	choriaConfig string
	user         string
	timeout      time.Duration
	asUser       bool // set in the re-executed child: do not switch again
	root         string
}

func (c *checkCommand) register(app *fisk.Application) {
	cmd := app.Command("check", "Checks that the service can start and work: configuration, files, helper, signer token, broker, Temporal, namespace, codec key. Changes nothing, never runs the helper")
	cmd.Flag("config", "Provisioner configuration file (default: the unit's --config, else "+defaultConfig+")").StringVar(&c.config)
	cmd.Flag("choria-config", "Choria client configuration file (default: the unit's --choria-config, else the YAML's choria_config)").StringVar(&c.choriaConfig)
	cmd.Flag("user", "Check as this user (default: the installed unit's User=, else choria-provisioner when it exists)").StringVar(&c.user)
	cmd.Flag("timeout", "Timeout of each network check").Default("10s").DurationVar(&c.timeout)
	cmd.Flag("as-service-user", "internal: already switched to the service user").Hidden().UnNegatableBoolVar(&c.asUser)
	cmd.Flag("unit-root", "internal (tests): read the unit under this root").Hidden().StringVar(&c.root)
}

func (c *checkCommand) run(ctx context.Context) error {
	sb, err := preflight.LoadSandbox(c.root, preflight.UnitName)
	if err != nil {
		return fmt.Errorf("reading the unit: %w", err)
	}
	if c.config == "" {
		c.config = defaultConfig
		if sb != nil && sb.Config != "" {
			c.config = sb.Config
		}
	}
	if c.choriaConfig == "" && sb != nil {
		c.choriaConfig = sb.ChoriaConfig
	}

	name := c.user
	if name == "" {
		switch {
		case sb != nil && sb.User != "":
			name = sb.User
		case sb != nil:
			name = "root" // a unit without User= runs as root
		default:
			if _, err := user.Lookup("choria-provisioner"); err == nil {
				name = "choria-provisioner"
			}
		}
	}
	me, err := user.Current()
	if err != nil {
		return err
	}
	if name == "" {
		name = me.Username
	}

	if !c.asUser && name != me.Username {
		if os.Geteuid() != 0 {
			preflight.Print(os.Stdout, preflight.Result{Name: "user", Status: preflight.Warn,
				Detail: fmt.Sprintf("running as %s, not as the service user %s: file permissions are %s's", me.Username, name, me.Username), Fix: "run check as root to check as " + name})
		} else {
			return c.asServiceUser(ctx, name)
		}
		name = me.Username
	}

	failed := preflight.Run(ctx, preflight.Options{
		ConfigFile: c.config, ChoriaConfig: c.choriaConfig, User: name, Timeout: c.timeout, Sandbox: sb,
	}, func(r preflight.Result) { preflight.Print(os.Stdout, r) })
	if failed > 0 {
		fmt.Printf("%d check(s) failed: fix them, then run check again before starting the service\n", failed)
		return errChecksFailed
	}
	fmt.Println("every check passed")
	return nil
}

// asServiceUser runs this check again as name, with the environment systemd gives the service
// (its PATH, HOME and USER, and the caller's PROVISIONER_* overrides).
func (c *checkCommand) asServiceUser(ctx context.Context, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		preflight.Print(os.Stdout, preflight.Result{Name: "user", Status: preflight.Fail,
			Detail: fmt.Sprintf("the service user %s does not exist", name), Fix: "install the package (it creates the user), or pass --user"})
		return errChecksFailed
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	var groups []uint32
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	preflight.Print(os.Stdout, preflight.Result{Name: "user", Status: preflight.OK, Detail: fmt.Sprintf("checking as %s (uid %s, gid %s), as the service runs", name, u.Uid, u.Gid)})

	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"check", "--as-service-user", "--user", name, "--config", c.config, "--timeout", c.timeout.String()}
	if c.choriaConfig != "" {
		args = append(args, "--choria-config", c.choriaConfig)
	}
	if c.root != "" {
		args = append(args, "--unit-root", c.root)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = []string{"PATH=" + servicePath, "HOME=" + u.HomeDir, "USER=" + name, "LOGNAME=" + name}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PROVISIONER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return errChecksFailed
	}
	if err != nil {
		return fmt.Errorf("running the checks as %s: %w (the binary must be executable by %s)", name, err, name)
	}
	return nil
}
