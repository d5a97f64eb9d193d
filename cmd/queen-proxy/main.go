// Command queen-proxy is the front door of Queen cells: `queen-proxy serve` (the default) runs
// the proxy; the other subcommands administer its control-plane database directly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"queen/config"
	"queen/proxy/pxdb"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// env is what a subcommand may use of the process.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// command is an administration subcommand.
type command struct {
	usage string // its arguments
	run   func(ctx context.Context, e env, args []string) error
}

var commands = map[string]command{
	"cells add":     {"NAME --upstream URL[,URL...] [--broker-token TOKEN] [--tenant ID]", cellsAdd},
	"users add":     {"NAME --cell CELL --role reader|writer|operator (the password on standard input)", usersAdd},
	"users disable": {"NAME (ends its sessions on every proxy)", usersDisabler(true)},
	"users enable":  {"NAME", usersDisabler(false)},
	"keys create":   {"--cell CELL --classes CLASS[,CLASS...] [--expires 90d]", keysCreate},
	"keys revoke":   {"ID", keysRevoke},
	"keys list":     {"", keysList},
}

// badArgs marks an error in the command line: exit code 2 and the command's usage.
type badArgs struct{ error }

func badArgsf(format string, args ...any) error { return badArgs{fmt.Errorf(format, args...)} }

// run is main without the process: it returns the exit code (0 done, 1 failed, 2 bad arguments).
func run(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	e := env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}

	if len(args) == 0 || args[0] == "serve" {
		if len(args) > 0 {
			args = args[1:]
		}
		if err := runServe(ctx, args, getenv, stdout, stderr); err != nil {
			fmt.Fprintln(stderr, "queen-proxy:", err)
			return 1
		}
		return 0
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	}
	name := strings.Join(args[:min(2, len(args))], " ")
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "queen-proxy: unknown command %q\n%s", name, usage())
		return 2
	}
	err := cmd.run(ctx, e, args[2:])
	var bad badArgs
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "usage: queen-proxy %s %s\n", name, cmd.usage)
		return 0
	case errors.As(err, &bad), errors.Is(err, pxdb.ErrInvalid):
		fmt.Fprintf(stderr, "queen-proxy %s: %v\nusage: queen-proxy %s %s\n", name, err, name, cmd.usage)
		return 2
	default:
		fmt.Fprintf(stderr, "queen-proxy %s: %v\n", name, err)
		return 1
	}
}

func usage() string {
	lines := []string{"usage:", "  queen-proxy [serve]"}
	for name, c := range commands {
		lines = append(lines, strings.TrimRight("  queen-proxy "+name+" "+c.usage, " "))
	}
	sort.Strings(lines[2:])
	return strings.Join(lines, "\n") + "\n"
}

// parseArgs parses fs's flags wherever they stand among the arguments (flag stops at the first
// argument that is not a flag; `cells add NAME --upstream URL` puts one first) and returns the
// positional arguments, which must be n.
func parseArgs(fs *flag.FlagSet, args []string, n int) ([]string, error) {
	fs.SetOutput(io.Discard) // run reports the error, with the usage
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, badArgs{err}
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != n {
		return nil, badArgsf("want %d argument(s), got %d %q", n, len(positional), positional)
	}
	return positional, nil
}

// required refuses an empty flag value.
func required(name, value string) error {
	if value == "" {
		return badArgsf("--%s is required", name)
	}
	return nil
}

// openStore opens the control-plane database as the environment says.
func openStore(ctx context.Context, e env) (*pxdb.Store, error) {
	cfg, err := config.LoadProxyDB(e.getenv)
	if err != nil {
		return nil, err
	}
	// Warnings only: a command's output is its answer.
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return pxdb.Open(ctx, cfg, log)
}

// actor is who the audit trail says ran a command: the operating-system user, as $USER names it.
func actor(getenv func(string) string) pxdb.Actor {
	who := "cli"
	if u := getenv("USER"); u != "" {
		who = "cli:" + u
	}
	return pxdb.Actor{Who: who, Credential: "cli"}
}
