/* Core error codes to the gem's exception classes (defined in lib/ptmalloc_dump/errors.rb). */
#include "bindings/bindings.h"

static VALUE error_class(ptmd_errcode code)
{
    const char *name;
    switch (code) {
    case PTMD_E_SYMBOLS: name = "PtmallocDump::SymbolsNotFoundError"; break;
    case PTMD_E_LIBC: name = "PtmallocDump::UnsupportedLibcError"; break;
    case PTMD_E_ALLOCATOR: name = "PtmallocDump::UnsupportedAllocatorError"; break;
    case PTMD_E_PLATFORM: name = "PtmallocDump::UnsupportedPlatformError"; break;
    case PTMD_E_FORMAT: name = "PtmallocDump::FormatError"; break;
    case PTMD_E_BUSY: name = "PtmallocDump::BusyError"; break;
    case PTMD_E_HEAP: name = "PtmallocDump::HeapDamagedError"; break;
    case PTMD_E_PTRACE: name = "PtmallocDump::PtracePermissionError"; break;
    case PTMD_E_TARGET: name = "PtmallocDump::TargetGoneError"; break;
    case PTMD_E_LOCKED: name = "PtmallocDump::ArenaLockedError"; break;
    case PTMD_E_CORE: name = "PtmallocDump::CoreFileError"; break;
    case PTMD_E_STOP: name = "PtmallocDump::StopTimeoutError"; break;
    case PTMD_E_ARGUMENT: return rb_eArgError;
    case PTMD_E_NOMEM: return rb_eNoMemError;
    default: name = "PtmallocDump::Error"; break;
    }
    return rb_path2class(name);
}

void ptmd_rb_raise(const ptmd_err *err)
{
    if (err->code == PTMD_E_SYSTEM) {
        VALUE msg = rb_sprintf("%s %s", err->msg, err->path);
        rb_syserr_fail_str(err->sys_errno, msg);
    }
    rb_raise(error_class(err->code), "%s", err->msg);
}

void ptmd_errors_init(void)
{
    /* the classes live in Ruby; make sure they were loaded first */
    rb_path2class("PtmallocDump::Error");
}
