package natsnode

import "flag"

// Flags are the credential flags every Weft command takes: --creds,
// --nkey, --user, --password, --inbox-prefix and --tlsca, --tlscert,
// --tlskey. Each defaults to its
// environment variable (FromEnv); a flag given overrides it.
type Flags struct {
	creds, nkey, user, password, inboxPrefix string
	tlsCA, tlsCert, tlsKey                   string
}

// RegisterFlags adds the credential flags to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.creds, "creds", "", "NATS credentials file (.creds, e.g. one of weft roles'; default $"+EnvCreds+")")
	fs.StringVar(&f.nkey, "nkey", "", "NATS nkey seed file (default $"+EnvNkey+")")
	fs.StringVar(&f.user, "user", "", "NATS user name (default $"+EnvUser+")")
	fs.StringVar(&f.password, "password", "", "NATS password for --user (default $"+EnvPassword+"; prefer the variable: flags show in ps)")
	fs.StringVar(&f.inboxPrefix, "inbox-prefix", "", "reply subject prefix (default $"+EnvInboxPrefix+", or the one a roles creds file names)")
	fs.StringVar(&f.tlsCA, "tlsca", "", "CA (PEM) of the server's TLS certificate (default $"+EnvCA+"; use a tls:// URL)")
	fs.StringVar(&f.tlsCert, "tlscert", "", "client TLS certificate (PEM), with --tlskey (default $"+EnvCert+")")
	fs.StringVar(&f.tlsKey, "tlskey", "", "client TLS key (PEM) (default $"+EnvKey+")")
	return f
}

// Options returns the options of the flags that were given, to append
// after FromEnv's.
func (f *Flags) Options() []Option {
	var opts []Option
	if f.creds != "" {
		opts = append(opts, WithCredsFile(f.creds))
	}
	if f.nkey != "" {
		opts = append(opts, WithNkeyFile(f.nkey))
	}
	if f.user != "" {
		opts = append(opts, WithUserPassword(f.user, f.password))
	}
	if f.inboxPrefix != "" {
		opts = append(opts, WithInboxPrefix(f.inboxPrefix))
	}
	if f.tlsCA != "" || f.tlsCert != "" {
		opts = append(opts, WithTLS(f.tlsCA, f.tlsCert, f.tlsKey))
	}
	return opts
}
