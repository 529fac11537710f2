/* When a signal really arrived. Ruby runs a trap handler later, when the main thread next checks its
 * interrupts (with the GVL, up to a time slice after the signal); the handler's log line measures the
 * pause from the arrival, so a thin sigaction handler stamps the time (clock_gettime is
 * async-signal-safe) and passes the signal on to the handler it replaced, Ruby's own. Signal.trap
 * installs Ruby's handler again, so the Ruby side stamps again after each trap. */
#include "bindings/bindings.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#define PTMD_NSIG 65

static struct sigaction chained[PTMD_NSIG];
static volatile uint64_t arrived_ns[PTMD_NSIG];

static void stamp(int sig, siginfo_t *info, void *ctx)
{
    int saved = errno;
    struct timespec ts;
    const struct sigaction *next;
    if (sig <= 0 || sig >= PTMD_NSIG) return;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0)
        arrived_ns[sig] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    next = &chained[sig];
    errno = saved;
    if (next->sa_flags & SA_SIGINFO) {
        if (next->sa_sigaction) next->sa_sigaction(sig, info, ctx);
    } else if (next->sa_handler != SIG_DFL && next->sa_handler != SIG_IGN && next->sa_handler) {
        next->sa_handler(sig);
    }
    errno = saved;
}

/* _stamp_signal(signo) -> true when the stamping handler is (now) in front of the signal's handler. */
static VALUE rb_ptmd_stamp_signal(VALUE self, VALUE signo)
{
    int sig = NUM2INT(signo);
    struct sigaction now, mine;
    PTMD_UNUSED(self);
    if (sig <= 0 || sig >= PTMD_NSIG) rb_raise(rb_eArgError, "no signal %d", sig);
    if (sigaction(sig, NULL, &now) != 0) rb_sys_fail("sigaction");
    if (now.sa_flags & SA_SIGINFO && now.sa_sigaction == stamp) return Qtrue;
    if (!(now.sa_flags & SA_SIGINFO) && (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN)) return Qfalse;
    memset(&mine, 0, sizeof(mine));
    mine.sa_sigaction = stamp;
    mine.sa_mask = now.sa_mask;
    mine.sa_flags = now.sa_flags | SA_SIGINFO;
    chained[sig] = now;
    if (sigaction(sig, &mine, NULL) != 0) rb_sys_fail("sigaction");
    return Qtrue;
}

/* _signal_arrived_ns(signo) -> CLOCK_MONOTONIC nanoseconds of the signal's last arrival, or nil when
 * none was stamped since the last call. */
static VALUE rb_ptmd_signal_arrived_ns(VALUE self, VALUE signo)
{
    int sig = NUM2INT(signo);
    uint64_t t;
    PTMD_UNUSED(self);
    if (sig <= 0 || sig >= PTMD_NSIG) return Qnil;
    t = arrived_ns[sig];
    arrived_ns[sig] = 0;
    return t ? PTMD_U64(t) : Qnil;
}

void ptmd_signal_arrival_init(void)
{
    rb_define_singleton_method(ptmd_mPtmallocDump, "_stamp_signal", rb_ptmd_stamp_signal, 1);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_signal_arrived_ns", rb_ptmd_signal_arrived_ns, 1);
}
