package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/vantage-go/vantage/adapters/postgres"
	"github.com/vantage-go/vantage/ports"
)

func (a *app) instancesCommand() *cobra.Command {
	var liveWithin time.Duration
	cmd := &cobra.Command{
		Use:   "instances",
		Short: "List the engine instances and their heartbeats",
		Long: `List the engine instances recorded in the schema, by id: service, host,
process, how long ago each last heartbeat was, whether that makes it live,
and whether it is passive (takes no share of the streams nobody holds).

An instance is live while its last heartbeat is newer than --live-within;
set it to the engines' StaleInstanceThreshold. A stopped instance
deregisters; a crashed one stays listed, not live, until a live instance
abandons it. Ages are measured on the database's clock, which records the
heartbeats.

JSON: {"live_within_seconds", "instances": [{"id", "service", "host",
"pid", "started_at", "last_heartbeat_at", "heartbeat_age_seconds", "live",
"passive", "leased_streams", "metadata"}]}; leased_streams counts the
streams whose lease names the instance, expired or not: those it holds.`,
		Example: `  vantage instances
  vantage instances --live-within 1m --json | jq '.instances[] | select(.live | not) | .id'`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.action(func(ctx context.Context, _ []string) error {
		if liveWithin <= 0 {
			return usageErrorf("--live-within must be positive, got %s", liveWithin)
		}
		return a.instances(ctx, liveWithin)
	})
	cmd.Flags().DurationVar(&liveWithin, "live-within", postgres.LiveWithinDefault, "an instance whose heartbeat is newer is live")
	return cmd
}

// instanceView is an instance as the instances command reports it.
type instanceView struct {
	ID                  uuid.UUID         `json:"id"`
	Service             string            `json:"service"`
	Host                string            `json:"host"`
	PID                 int               `json:"pid"`
	StartedAt           *time.Time        `json:"started_at"`
	LastHeartbeatAt     *time.Time        `json:"last_heartbeat_at"`
	HeartbeatAgeSeconds float64           `json:"heartbeat_age_seconds"`
	Live                bool              `json:"live"`
	Passive             bool              `json:"passive"`
	LeasedStreams       int               `json:"leased_streams"`
	Metadata            map[string]string `json:"metadata"`

	age time.Duration
}

type instancesReport struct {
	LiveWithinSeconds float64        `json:"live_within_seconds"`
	Instances         []instanceView `json:"instances"`

	liveWithin time.Duration
}

func (r *instancesReport) writeText(w io.Writer) {
	if len(r.Instances) == 0 {
		fmt.Fprintln(w, "no instances")
		return
	}
	rows := make([][]string, len(r.Instances))
	live := 0
	for i, in := range r.Instances {
		rows[i] = []string{in.ID.String(), cell(in.Service), cell(in.Host), strconv.Itoa(in.PID),
			ageText(in.age) + " ago", yesNo(in.Live), yesNo(in.Passive)}
		if in.Live {
			live++
		}
	}
	writeTable(w, []string{"ID", "SERVICE", "HOST", "PID", "HEARTBEAT", "LIVE", "PASSIVE"}, rows)
	fmt.Fprintf(w, "%s, %d live (heartbeat within %s)\n", plural(len(r.Instances), "instance"), live, r.liveWithin)
}

func (a *app) instances(ctx context.Context, liveWithin time.Duration) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	cctx, cancel := a.call(ctx)
	defer cancel()
	list, err := s.admin.InstancesList(cctx)
	if err != nil {
		return err
	}
	now, err := a.now(ctx, s)
	if err != nil {
		return err
	}
	r := &instancesReport{LiveWithinSeconds: liveWithin.Seconds(), Instances: make([]instanceView, len(list)), liveWithin: liveWithin}
	for i, in := range list {
		r.Instances[i] = viewInstance(in, now, liveWithin)
	}
	return a.print(r)
}

func viewInstance(in ports.Instance, now time.Time, liveWithin time.Duration) instanceView {
	age := now.Sub(in.LastHeartbeatAt)
	meta := in.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return instanceView{
		ID:                  in.ID,
		Service:             in.ServiceName,
		Host:                in.HostName,
		PID:                 in.ProcessID,
		StartedAt:           jsonTime(in.StartedAt),
		LastHeartbeatAt:     jsonTime(in.LastHeartbeatAt),
		HeartbeatAgeSeconds: age.Seconds(),
		Live:                age < liveWithin,
		Passive:             in.Passive,
		LeasedStreams:       in.LeasedStreams,
		Metadata:            meta,
		age:                 age,
	}
}
