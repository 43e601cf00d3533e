// Command etcd-snapshot is the hosted backend's snapshot tool, in the control-plane image beside
// etcdctl and etcdutl (the image has no shell). The backend runs it in Jobs and init containers:
//
//	etcd-snapshot save --dir D --cluster UID --version V --keep N [--hourly H --daily D --weekly W
//	        --monthly M] [--member NAME=URL... --cacert CA --cert C --key K] [-- ETCDCTL-CONNECTION-FLAGS...]
//	    makes room on a full D first (backend.Retention.MakeRoom), takes a snapshot into D/UID/
//	    (backend/snapshots: etcdctl, checked with etcdutl, SHA-256 recorded), removes those the
//	    retention (backend.Retention) removes, and writes what it did as JSON to --result (the
//	    container's termination message, which the backend reads). With --store-endpoint, it
//	    uploads the snapshot, and those of D/UID/ the store lacks (an earlier upload failed),
//	    encrypted, and prunes the store with the same retention. With --member, from the
//	    member in the quorum (etcdmaint.Pick: the healthy leader, never one cut off from its
//	    peers), named in the result; none in the quorum: no snapshot, and nothing removed.
//	etcd-snapshot serve --dir D --cluster UID --name NAME --token-file F --tls-cert C --tls-key K
//	    checks snapshot NAME of UID and serves its file over HTTPS to --count clients that show the
//	    token (GET /snapshot), then exits; a refusal is written to --result.
//	etcd-snapshot maintain --member NAME=URL... --quota Q [--defrag] [--freed-at REV]
//	        --cacert CA --cert C --key K
//	    one pass of backend/etcdmaint over the members (a full etcd freed and disarmed; with
//	    --defrag, fragmented members defragmented one at a time), its report written as JSON to
//	    --result (the backend reads it: EtcdHealthy).
//	etcd-snapshot restore --url URL --token-file F --ca CA --sha256 S --data-dir DIR
//	        --name MEMBER --initial-cluster IC --initial-advertise-peer-urls P [--initial-cluster-token T]
//	    fetches a snapshot from a serve, checks its SHA-256 and restores it (etcdutl, the revision
//	    bumped and marked compacted: snapshots.RevisionBump) into DIR for member MEMBER of the etcd
//	    cluster of token T; nothing to do when DIR exists (a restore already made).
//	etcd-snapshot versions [--bin DIR]
//	    runs the image's kube-apiserver --version and etcd --version and writes the versions
//	    they report as JSON to --result (the hosted backend's image check before an upgrade).
package main

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/etcdmaint"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// Result is what save and serve write to --result.
type Result struct {
	// Snapshot is the snapshot taken (save) or served (serve).
	Snapshot *backend.Snapshot `json:"snapshot,omitempty"`
	// Removed are the snapshots save removed (those the retention flags remove, and those removed
	// for room).
	Removed []string `json:"removed,omitempty"`
	// Member is the etcd member save took the snapshot from (with --member).
	Member string `json:"member,omitempty"`
	// RemovedForSpace are those of Removed that the retention keeps, removed before the save
	// because the claim was full.
	RemovedForSpace []string `json:"removedForSpace,omitempty"`
	// Uploaded: save uploaded the snapshot to the object store (--store-endpoint).
	Uploaded bool `json:"uploaded,omitempty"`
	// UploadedLate are the earlier snapshots of the folder that save uploaded, newest first: the
	// store lacked them (an earlier save could not upload them).
	UploadedLate []string `json:"uploadedLate,omitempty"`
	// RemovedFromStore are the snapshots save removed from the object store (the retention).
	RemovedFromStore []string `json:"removedFromStore,omitempty"`
	// FromStore: serve fetched the snapshot from the object store, the folder lacking it.
	FromStore bool `json:"fromStore,omitempty"`
	// Error says why it failed.
	Error string `json:"error,omitempty"`
	// Refused: the snapshot cannot be restored (serve).
	Refused bool `json:"refused,omitempty"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: etcd-snapshot save|serve|restore|maintain|versions [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "save":
		err = save(ctx, os.Args[2:])
	case "serve":
		err = serve(ctx, os.Args[2:])
	case "restore":
		err = restore(ctx, os.Args[2:])
	case "maintain":
		err = maintain(ctx, os.Args[2:])
	case "versions":
		err = versions(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: save, serve, restore, maintain or versions", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-snapshot:", err)
		os.Exit(1)
	}
}

// store is the snapshots in dir, with the etcd tools beside this command in the image (or in
// $ETCD_TOOLS).
func store(dir string) snapshots.Store {
	bin := os.Getenv("ETCD_TOOLS")
	if exe, err := os.Executable(); err == nil && bin == "" {
		bin = filepath.Dir(exe)
	}
	return snapshots.Store{Dir: dir, Etcdctl: filepath.Join(bin, "etcdctl"), Etcdutl: filepath.Join(bin, "etcdutl")}
}

// writeResult writes r as JSON to file (and stdout), and returns err.
func writeResult(file string, r Result, err error) error {
	if err != nil {
		r.Error = err.Error()
	}
	data, _ := json.Marshal(r)
	fmt.Println(string(data))
	if file != "" {
		if werr := os.WriteFile(file, data, 0o600); werr != nil && err == nil {
			return werr
		}
	}
	return err
}

func save(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("save", flag.ExitOnError)
	dir := fs.String("dir", "/snapshots", "the snapshots' folder")
	cluster := fs.String("cluster", "", "the Cluster's UID")
	version := fs.String("version", "", "the Kubernetes version the cluster runs")
	var r backend.Retention
	fs.IntVar(&r.Keep, "keep", 24, "how many of the newest snapshots of the cluster to keep")
	fs.IntVar(&r.Hourly, "hourly", 0, "how many of the last hours keep their newest snapshot")
	fs.IntVar(&r.Daily, "daily", 0, "how many of the last days keep their newest snapshot")
	fs.IntVar(&r.Weekly, "weekly", 0, "how many of the last weeks keep their newest snapshot")
	fs.IntVar(&r.Monthly, "monthly", 0, "how many of the last months keep their newest snapshot")
	result := fs.String("result", "/dev/termination-log", "where to write the result")
	var ms members
	fs.Var(&ms, "member", "an etcd member, NAME=CLIENT-URL (repeated: every member; the snapshot is taken from one in the quorum)")
	cacert := fs.String("cacert", "", "etcd's CA (with --member)")
	cert := fs.String("cert", "", "a client certificate of etcd's CA (with --member)")
	key := fs.String("key", "", "its key")
	keysFile := fs.String("keys-file", "", "the encryption keys the snapshot needs (encryption.Kept, JSON), uploaded with it; missing: none")
	var sf storeFlags
	sf.register(fs)
	_ = fs.Parse(args)
	if *cluster == "" {
		return writeResult(*result, Result{}, errors.New("--cluster is required"))
	}
	cat, err := sf.catalog()
	if err != nil {
		return writeResult(*result, Result{}, err)
	}
	conn, member, err := snapshotSource(ctx, ms, *cacert, *cert, *key, fs.Args())
	if err != nil {
		return writeResult(*result, Result{}, err)
	}
	s := store(*dir)
	// No namespace in the claim's record: the backend records it in its catalog (updateCatalog).
	// The claim full: room made first (snapshots.Store.Save), said in RemovedForSpace.
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	saved, err := s.Save(ctx, r, types.UID(*cluster), "", *version, *dir, logf, conn...)
	res := Result{Removed: saved.Removed, RemovedForSpace: saved.RemovedForSpace, Member: member}
	if err != nil {
		return writeResult(*result, res, err)
	}
	res.Snapshot = &saved.Snapshot
	if cat != nil {
		up := saved.Snapshot
		up.Namespace = sf.namespace
		err = upload(ctx, cat, s, up, *keysFile, r, &res)
	}
	return writeResult(*result, res, err)
}

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("dir", "/snapshots", "the snapshots' folder")
	cluster := fs.String("cluster", "", "the UID of the Cluster the snapshot is of")
	name := fs.String("name", "", "the snapshot's name")
	listen := fs.String("listen", ":8443", "the address to serve on")
	tokenFile := fs.String("token-file", "", "the file with the token a client must show")
	cert := fs.String("tls-cert", "", "the serving certificate")
	key := fs.String("tls-key", "", "its key")
	timeout := fs.Duration("timeout", 30*time.Minute, "how long to wait for the clients")
	count := fs.Int("count", 1, "how many clients fetch it (the members of an etcd) before it ends")
	result := fs.String("result", "/dev/termination-log", "where to write the result")
	var sf storeFlags
	sf.register(fs)
	_ = fs.Parse(args)
	s := store(*dir)
	cat, err := sf.catalog()
	if err != nil {
		return writeResult(*result, Result{}, err)
	}
	had := exists(s.File(types.UID(*cluster), *name))
	if err := fetchFromStore(ctx, cat, s, sf.namespace, types.UID(*cluster), *name); err != nil {
		return writeResult(*result, Result{Refused: backend.IsReason(err, backend.ReasonRestoreRefused)}, err)
	}
	snap, err := s.Check(ctx, types.UID(*cluster), *name)
	if err != nil {
		return writeResult(*result, Result{Refused: backend.IsReason(err, backend.ReasonRestoreRefused)}, err)
	}
	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		return writeResult(*result, Result{}, err)
	}
	token = []byte(strings.TrimSpace(string(token)))
	served := make(chan error, *count+1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /snapshot", func(w http.ResponseWriter, r *http.Request) {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if len(token) == 0 || subtle.ConstantTimeCompare([]byte(got), token) != 1 {
			http.Error(w, "a token is needed", http.StatusUnauthorized)
			return
		}
		f, err := os.Open(s.File(snap.Cluster, snap.Name))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Snapshot-SHA256", snap.SHA256)
		if _, err := io.Copy(w, f); err != nil {
			fmt.Fprintln(os.Stderr, "serving the snapshot:", err) // the client tries again
			return
		}
		select {
		case served <- nil:
		default:
		}
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	go func() {
		if err := srv.ListenAndServeTLS(*cert, *key); !errors.Is(err, http.ErrServerClosed) {
			served <- err
		}
	}()
	fmt.Printf("serving snapshot %s of %s on %s\n", snap.Name, snap.Cluster, *listen)
	deadline := time.After(*timeout)
	for n := 0; n < *count && err == nil; n++ {
		select {
		case err = <-served:
		case <-deadline:
			err = fmt.Errorf("%d of %d clients fetched the snapshot in %s", n, *count, *timeout)
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	return writeResult(*result, Result{Snapshot: &snap, FromStore: !had && exists(s.File(snap.Cluster, snap.Name))}, err)
}

func restore(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("restore", flag.ExitOnError)
	url := fs.String("url", "", "the serve's URL of the snapshot")
	tokenFile := fs.String("token-file", "", "the file with the token to show")
	caFile := fs.String("ca", "", "the CA of the serve's certificate")
	sum := fs.String("sha256", "", "the snapshot's SHA-256")
	dataDir := fs.String("data-dir", "", "the etcd data folder to make")
	name := fs.String("name", "", "the etcd member's name")
	initial := fs.String("initial-cluster", "", "etcd's --initial-cluster")
	peers := fs.String("initial-advertise-peer-urls", "", "the member's peer URLs")
	clusterToken := fs.String("initial-cluster-token", "", "the restored etcd cluster's token: a new one per restore makes a new cluster ID, which no member of the old cluster can join")
	_ = fs.Parse(args)
	if _, err := os.Stat(*dataDir); err == nil {
		fmt.Printf("%s exists: restored already\n", *dataDir)
		return nil
	}
	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		return err
	}
	hc, err := tlsClient(*caFile, "", "")
	if err != nil {
		return err
	}
	file := *dataDir + ".snapshot"
	defer os.Remove(file)
	// The serve may not answer yet (its pod starting): try every 2 s for 10 minutes. A fetch under
	// way is not cut at the end (ctx, not the poll's context): a large snapshot takes its time.
	pollErr := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(context.Context) (bool, error) {
		err = fetch(ctx, hc, *url, strings.TrimSpace(string(token)), file)
		var refused refusedError
		if err == nil || errors.As(err, &refused) {
			return true, nil
		}
		fmt.Fprintln(os.Stderr, "fetching the snapshot:", err, "(trying again)")
		return false, nil
	})
	if err == nil {
		err = pollErr // ended before a first fetch
	}
	if err != nil {
		return fmt.Errorf("fetching the snapshot from %s: %w", *url, err)
	}
	got, _, err := snapshots.SHA256(file)
	if err != nil {
		return err
	}
	if got != *sum {
		return fmt.Errorf("the snapshot fetched has SHA-256 %s, not %s: not restored", got, *sum)
	}
	if err := store("").Restore(ctx, file, *dataDir, *name, *initial, *peers, *clusterToken); err != nil {
		return err
	}
	fmt.Printf("restored the snapshot into %s\n", *dataDir)
	return nil
}

// refusedError is an answer of the serve that asking again does not change.
type refusedError struct{ error }

// fetch GETs url with the token into file.
func fetch(ctx context.Context, hc *http.Client, url, token, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode < 500 {
			return refusedError{err} // asking again changes nothing
		}
		return err
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// members is the repeated --member NAME=URL flag.
type members []etcdmaint.Member

func (m *members) String() string { return fmt.Sprint(len(*m), " members") }

func (m *members) Set(v string) error {
	name, url, ok := strings.Cut(v, "=")
	if !ok || name == "" || url == "" {
		return fmt.Errorf("%q is not NAME=URL", v)
	}
	*m = append(*m, etcdmaint.Member{Name: name, URL: url})
	return nil
}

func maintain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("maintain", flag.ExitOnError)
	var ms members
	fs.Var(&ms, "member", "an etcd member, NAME=CLIENT-URL (repeated: every member)")
	quota := fs.Int64("quota", 0, "etcd's --quota-backend-bytes")
	defrag := fs.Bool("defrag", false, "a periodic defragmentation is due")
	freedAt := fs.Int64("freed-at", 0, "the revision a full etcd was last freed at (the last report's freedAt)")
	cacert := fs.String("cacert", "", "etcd's CA")
	cert := fs.String("cert", "", "a client certificate of etcd's CA")
	key := fs.String("key", "", "its key")
	result := fs.String("result", "/dev/termination-log", "where to write the report")
	_ = fs.Parse(args)
	if len(ms) == 0 || *quota <= 0 {
		return errors.New("--member and --quota are required")
	}
	c, err := tlsClient(*cacert, *cert, *key)
	if err != nil {
		return err
	}
	for i := range ms {
		ms[i].Client = c
	}
	r := etcdmaint.Maintain(ctx, ms, etcdmaint.Policy{Quota: *quota, Defrag: *defrag, FreedAt: *freedAt},
		func(msg string, kv ...any) { fmt.Println(append([]any{msg}, kv...)...) })
	for i := range r.Members { // the termination message holds 4 KiB
		if e := r.Members[i].Error; len(e) > 300 {
			r.Members[i].Error = e[:300] + "…"
		}
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(data))
	return os.WriteFile(*result, data, 0o600)
}

// tlsClient is an HTTP client that trusts the CA in file cacert and presents the client
// certificate cert/key ("": none); with no cacert, a plain HTTP client.
func tlsClient(cacert, cert, key string) (*http.Client, error) {
	if cacert == "" {
		return &http.Client{}, nil
	}
	pem, err := os.ReadFile(cacert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", cacert)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}
