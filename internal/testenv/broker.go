package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PrivateBroker is a Kafka broker of the test's own, for faults that must
// never touch the broker the other tests share (a freeze with SIGSTOP, a
// kill): Pid is the broker's process.
type PrivateBroker struct {
	Addr string
	Pid  int
	env  []string // kafka.sh's: SLUICE_STATE and the ports name this broker
}

// StartPrivateBroker starts deploy/local/kafka.sh on free loopback ports
// with a temporary state directory, and stops it when the test ends (after
// a SIGCONT: a failed test may leave it frozen). With
// SLUICE_TEST_PRIVATE_KAFKA set to the address of a broker that kafka.sh
// started under SLUICE_STATE (a private one, never the shared one), it uses
// that one and leaves it running: a broker takes 15–50 s to start on a
// busy machine.
func StartPrivateBroker(t *testing.T) *PrivateBroker {
	t.Helper()
	if addr := os.Getenv("SLUICE_TEST_PRIVATE_KAFKA"); addr != "" {
		pid, err := readPid(os.Getenv("SLUICE_STATE"))
		if err != nil {
			t.Fatalf("SLUICE_TEST_PRIVATE_KAFKA needs the SLUICE_STATE of its kafka.sh: %v", err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		// Restart finds the broker by SLUICE_STATE and SLUICE_KAFKA_PORT:
		// they must name this one.
		if port := os.Getenv("SLUICE_KAFKA_PORT"); port == "" || !strings.HasSuffix(addr, ":"+port) {
			t.Fatalf("SLUICE_TEST_PRIVATE_KAFKA=%s needs SLUICE_KAFKA_PORT (and SLUICE_KAFKA_CONTROLLER_PORT) of its kafka.sh, got %q", addr, port)
		}
		return &PrivateBroker{Addr: addr, Pid: pid, env: os.Environ()}
	}
	state := t.TempDir()
	port, cport := FreePort(t), FreePort(t)
	env := append(os.Environ(), "SLUICE_STATE="+state, "SLUICE_KAFKA_PORT="+strconv.Itoa(port),
		"SLUICE_KAFKA_CONTROLLER_PORT="+strconv.Itoa(cport), "SLUICE_KAFKA_START_TIMEOUT=180")
	run := func(arg string) ([]byte, error) {
		cmd := exec.Command(kafkaScript(), arg)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	b := &PrivateBroker{Addr: fmt.Sprintf("127.0.0.1:%d", port), env: env}
	t.Cleanup(func() {
		if b.Pid == 0 { // up failed before writing its pid: kill what it may have started
			if pid, err := readPid(state); err == nil {
				b.Pid = pid
			}
		}
		if b.Pid != 0 {
			_ = syscall.Kill(b.Pid, syscall.SIGCONT)
		}
		if out, err := run("down"); err != nil {
			t.Errorf("stopping the private broker: %v\n%s", err, out)
		}
	})
	if out, err := run("up"); err != nil {
		t.Fatalf("private broker: %v\n%s", err, out)
	}
	pid, err := readPid(state)
	if err != nil {
		t.Fatal(err)
	}
	b.Pid = pid
	return b
}

// Restart restarts the broker with kafka.sh (a stop, then a start that
// waits until it answers) and notes its new pid.
func (b *PrivateBroker) Restart(t *testing.T) { b.RestartAfter(t, 0) }

// RestartAfter is Restart with the broker kept down for hold between the
// stop and the start: an outage of a chosen length, where Restart's is
// however long the JVM takes on the machine's load.
func (b *PrivateBroker) RestartAfter(t *testing.T, hold time.Duration) {
	t.Helper()
	run := func(arg string) {
		cmd := exec.Command(kafkaScript(), arg)
		cmd.Env = b.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s the private broker: %v\n%s", arg, err, out)
		}
	}
	if hold <= 0 {
		run("restart")
	} else {
		run("down")
		time.Sleep(hold)
		run("up")
	}
	state := ""
	for _, kv := range b.env { // the last one counts, as for exec
		if v, ok := strings.CutPrefix(kv, "SLUICE_STATE="); ok {
			state = v
		}
	}
	if pid, err := readPid(state); err == nil {
		b.Pid = pid
	}
}

func readPid(state string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(state, "kafka", "kafka.pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, fmt.Errorf("kafka.pid: %w", err)
	}
	return pid, nil
}

// FreePort returns a loopback port nothing listens on now (another
// process may take it before the caller listens: good enough for tests).
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func kafkaScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "local", "kafka.sh")
}
