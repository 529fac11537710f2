# frozen_string_literal: true

# Fiddle bindings to spec/fixtures/ext/heap_threads.c: native threads that malloc and free exactly
# what they are told. Unlike Ruby threads they allocate nothing of their own, so a test knows every
# chunk it made.
module NativeThreads
  extend SpecHelpers

  LIB = Fiddle.dlopen(build_fixture("heap_threads", extra_flags: ["-lpthread"]))
  VOIDP = Fiddle::TYPE_VOIDP
  SIZE_T = Fiddle::TYPE_SIZE_T
  INT = Fiddle::TYPE_INT

  START = Fiddle::Function.new(LIB["hw_start"], [INT], INT)
  MALLOC = Fiddle::Function.new(LIB["hw_malloc"], [INT, VOIDP, VOIDP, SIZE_T], Fiddle::TYPE_VOID)
  FREE = Fiddle::Function.new(LIB["hw_free"], [INT, VOIDP, SIZE_T], Fiddle::TYPE_VOID)
  FREE_PLAN = Fiddle::Function.new(LIB["hw_free_plan"], [VOIDP, VOIDP, SIZE_T], Fiddle::TYPE_VOID)
  STOP = Fiddle::Function.new(LIB["hw_stop"], [INT], Fiddle::TYPE_VOID)
  MALLOC_MANY = Fiddle::Function.new(LIB["malloc_many"], [INT, SIZE_T, SIZE_T], INT)
  FREE_MANY = Fiddle::Function.new(LIB["free_many"], [INT], Fiddle::TYPE_VOID)
  HOLD = Fiddle::Function.new(LIB["hold_blocks"], [SIZE_T, SIZE_T], Fiddle::TYPE_UINTPTR_T)
  RELEASE = Fiddle::Function.new(LIB["release_blocks"], [], Fiddle::TYPE_VOID)
  CHURN_START = Fiddle::Function.new(LIB["churn_start"], [INT], INT)
  CHURN_OPS = Fiddle::Function.new(LIB["churn_ops_done"], [], Fiddle::TYPE_LONG)
  CHURN_STOP = Fiddle::Function.new(LIB["churn_stop_all"], [], Fiddle::TYPE_VOID)
  EXITERS_START = Fiddle::Function.new(LIB["exiters_start"], [INT], INT)
  EXITERS_RELEASE = Fiddle::Function.new(LIB["exiters_release"], [INT, INT], INT)
  EXITERS_DONE = Fiddle::Function.new(LIB["exiters_done"], [], INT)

  # Starts worker thread i; returns its tid.
  def self.start(index)
    START.call(index)
  end

  def self.stop(index)
    STOP.call(index)
  end

  # mallocs each size on worker `index` (-1: the calling thread); returns the addresses.
  def self.malloc(index, sizes)
    sz = sizes.pack("Q*")
    out = "\0".b * (8 * sizes.size)
    MALLOC.call(index, Fiddle::Pointer[out], Fiddle::Pointer[sz], sizes.size)
    out.unpack("Q*")
  end

  # A prepared free: the argument buffer is built now, so running it allocates nothing in Ruby.
  def self.prepare_free(index, addrs)
    buf = addrs.pack("Q*")
    ptr = Fiddle::Pointer[buf]
    n = addrs.size
    -> { FREE.call(index, ptr, n) && buf }
  end

  # A prepared plan of frees: addrs[k] is freed by thread threads[k] (-1: the caller), all in one C
  # call, so no Ruby or Fiddle allocation falls between two frees.
  def self.prepare_free_plan(threads, addrs)
    tb = threads.pack("l*")
    ab = addrs.pack("Q*")
    tp = Fiddle::Pointer[tb]
    ap = Fiddle::Pointer[ab]
    n = addrs.size
    -> { FREE_PLAN.call(tp, ap, n) && [tb, ab] }
  end

  # mallocs n blocks kept only in a C array; returns their addresses (read from that array)
  def self.hold(n, size)
    array = HOLD.call(n, size)
    Fiddle::Pointer.new(array)[0, 8 * n].unpack("Q*")
  end

  def self.release
    RELEASE.call
  end

  # worker `index` mallocs n blocks of `size`, remembered on the C side only (no Ruby allocation)
  def self.malloc_many(index, n, size)
    MALLOC_MANY.call(index, n, size)
  end

  def self.free_many(index)
    FREE_MANY.call(index)
  end

  def self.churn_start(n)
    CHURN_START.call(n)
  end

  def self.churn_ops
    CHURN_OPS.call
  end

  def self.churn_stop
    CHURN_STOP.call
  end

  # Starts n threads that each fill their tcache (8 bins of 7 blocks) and wait; returns once all are
  # filled, so no tcache changes but by the exits that follow.
  def self.exiters_start(n)
    EXITERS_START.call(n)
  end

  # Lets the waiting threads exit one at a time, min_us..max_us apart, from a native pacer thread.
  def self.exiters_release(min_us, max_us)
    raise "pthread_create failed" unless EXITERS_RELEASE.call(min_us, max_us).zero?
  end

  # @return [Boolean] whether every released thread has exited (and been joined)
  def self.exiters_done?
    EXITERS_DONE.call == 1
  end
end
