/* glibc's own counters, as exact as the running glibc gives them: mallinfo2() (2.33 and later) has
 * size_t fields; older glibc has only mallinfo(), whose int fields keep the low 32 bits. */
#include "capture/mallinfo.h"
#include "format/ptmd.h"

#include <malloc.h>

int ptmd_mallinfo(ptmd_mallinfo2_rec *out)
{
#ifdef HAVE_MALLINFO2
    struct mallinfo2 mi = mallinfo2();
#define PTMD_MI(f) ((uint64_t)mi.f)
#else
    struct mallinfo mi = mallinfo();
#define PTMD_MI(f) ((uint64_t)(unsigned int)mi.f)
#endif
    out->arena = PTMD_MI(arena);
    out->ordblks = PTMD_MI(ordblks);
    out->smblks = PTMD_MI(smblks);
    out->hblks = PTMD_MI(hblks);
    out->hblkhd = PTMD_MI(hblkhd);
    out->usmblks = PTMD_MI(usmblks);
    out->fsmblks = PTMD_MI(fsmblks);
    out->uordblks = PTMD_MI(uordblks);
    out->fordblks = PTMD_MI(fordblks);
    out->keepcost = PTMD_MI(keepcost);
#undef PTMD_MI
#ifdef HAVE_MALLINFO2
    return 1;
#else
    return 0;
#endif
}
