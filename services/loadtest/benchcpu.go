package loadtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// StackCPU is the CPU time per request of each process of the stack over
// one series, and in total (issue 25: what a governed call costs, whole).
// The broker's share is the whole broker process's: on a broker shared
// with other clients it includes their work, so the figure is clean only
// on a broker of the bench's own (deploy/local/kafka.sh on private ports).
type StackCPU struct {
	Requests         int     `json:"requests"`
	GatewayMsPerReq  float64 `json:"gateway_cpu_ms_per_request"`
	LedgersMsPerReq  float64 `json:"ledgers_cpu_ms_per_request"`
	BrokerMsPerReq   float64 `json:"broker_cpu_ms_per_request"`
	SimulatorMsPerRq float64 `json:"simulator_cpu_ms_per_request"`
	// TotalMsPerReq is gateway + ledgers + broker: Sluice's cost on top of
	// the provider call (the simulator stands in for the provider and is
	// left out).
	TotalMsPerReq float64 `json:"total_cpu_ms_per_request"`
	// CoresPer1000 is TotalMsPerReq turned into sizing: cores busy at
	// 1,000 requests per second (1,000 × ms per request / 1,000 ms).
	CoresPer1000 float64 `json:"cores_per_1000_rps"`
	// IdleCores is what the stack's gateway, ledgers and broker burn with
	// no request at all (fetch polls, heartbeats, group and transaction
	// upkeep), measured before the series; MarginalMsPerReq is
	// TotalMsPerReq less that idle burn over the series: the cost of one
	// more request, the figure that scales with the rate.
	IdleCores        float64 `json:"idle_cores"`
	MarginalMsPerReq float64 `json:"marginal_cpu_ms_per_request"`
	// BrokerPID is the broker process read; 0 when there was none on
	// this machine or its CPU time could not be read (its share is then 0).
	BrokerPID int    `json:"broker_pid"`
	Loadavg   string `json:"loadavg"`
}

// stackPIDs are the processes whose CPU time a series reads.
type stackPIDs struct {
	gateway, sim, broker int
	ledgers              []int
}

// cpuSample is each process's CPU time at one moment. brokerOK is false
// when the broker's could not be read (it is not the bench's process: it
// may belong to another user or have been restarted since it was found);
// the broker's share is then left out rather than failing the bench.
type cpuSample struct {
	gateway, sim, broker, ledgers time.Duration
	brokerOK                      bool
}

func (p stackPIDs) sample() (cpuSample, error) {
	var s cpuSample
	var err error
	if s.gateway, err = procCPU(p.gateway, "gateway"); err != nil {
		return s, err
	}
	if s.sim, err = procCPU(p.sim, "simulator"); err != nil {
		return s, err
	}
	for i, pid := range p.ledgers {
		d, err := procCPU(pid, "ledger-"+strconv.Itoa(i+1))
		if err != nil {
			return s, err
		}
		s.ledgers += d
	}
	if p.broker > 0 {
		s.broker, err = procCPU(p.broker, "broker")
		s.brokerOK = err == nil
	}
	return s, nil
}

// total is the stack's CPU time less the simulator's.
func (s cpuSample) total() time.Duration { return s.gateway + s.ledgers + s.broker }

// perRequest turns two samples n requests and el apart into a StackCPU;
// idle is the stack's CPU per second of wall time with no requests.
func perRequest(a, b cpuSample, n int, el time.Duration, idle float64, brokerPID int) StackCPU {
	ms := func(d time.Duration) float64 {
		if n == 0 {
			return 0
		}
		return float64(d.Microseconds()) / 1000 / float64(n)
	}
	c := StackCPU{Requests: n, GatewayMsPerReq: ms(b.gateway - a.gateway), LedgersMsPerReq: ms(b.ledgers - a.ledgers),
		SimulatorMsPerRq: ms(b.sim - a.sim)}
	if a.brokerOK && b.brokerOK {
		c.BrokerMsPerReq, c.BrokerPID = ms(b.broker-a.broker), brokerPID
	}
	c.TotalMsPerReq = c.GatewayMsPerReq + c.LedgersMsPerReq + c.BrokerMsPerReq
	c.CoresPer1000 = c.TotalMsPerReq
	c.IdleCores = idle
	if n > 0 {
		c.MarginalMsPerReq = max(0, c.TotalMsPerReq-idle*float64(el.Milliseconds())/float64(n))
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		c.Loadavg = strings.Join(strings.Fields(string(la))[:3], " ")
	}
	return c
}

// idleCores samples the stack for d with no requests: its CPU per second,
// and the gateway's alone.
func (p stackPIDs) idleCores(d time.Duration) (stack, gateway float64, err error) {
	a, err := p.sample()
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	time.Sleep(d)
	b, err := p.sample()
	if err != nil {
		return 0, 0, err
	}
	if !a.brokerOK || !b.brokerOK {
		a.broker, b.broker = 0, 0
	}
	el := time.Since(t0).Seconds()
	return (b.total() - a.total()).Seconds() / el, (b.gateway - a.gateway).Seconds() / el, nil
}

// listenerPID finds the process listening on the TCP port of addr
// (host:port) on this machine, from /proc/net/tcp{,6} and the processes'
// socket descriptors; 0 when there is none here (a remote broker) or it
// cannot be read.
func listenerPID(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0
	}
	want := fmt.Sprintf(":%04X", p)
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// local_address rem_address st … inode (field 9); 0A = LISTEN.
			if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if l, err := os.Readlink(fd); err == nil && inodes[l] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}
