# frozen_string_literal: true

module PtmallocDump
  # A cheap reading of this process's memory, for a time series: no chunk walk, no file.
  module Stats
    MALLINFO_KEYS = %i[arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost].freeze
    STATUS_FIELDS = { "VmRSS" => :vm_rss, "VmHWM" => :vm_hwm, "RssAnon" => :anonymous, "RssFile" => :file_backed,
                      "RssShmem" => :shmem, "VmSwap" => :swap }.freeze
    ROLLUP_FIELDS = { "Rss" => :rollup_rss, "Pss" => :pss, "Private_Dirty" => :private_dirty,
                      "Shared_Clean" => :shared_clean, "Shared_Dirty" => :shared_dirty }.freeze
    GC_KEYS = %i[count major_gc_count heap_allocated_pages heap_live_slots heap_free_slots old_objects
                 malloc_increase_bytes oldmalloc_increase_bytes].freeze

    @arena_hint = 8
    @lock = Mutex.new # the native reading fills one static buffer, without the GVL

    class << self
      # @see PtmallocDump.stats
      def read(smaps: false)
        rss = status_figures
        rss.merge!(rollup_figures) if smaps
        reading = { time: Time.now.to_f, pid: Process.pid, rss: rss, gc: gc_figures }
        fill(reading)
      end

      private

      def fill(reading)
        3.times do
          malloc = MALLINFO_KEYS.to_h { |k| [k, 0] }
          arenas = Array.new(@arena_hint) { { address: 0, system_mem: 0, max_system_mem: 0 } }
          reading[:malloc] = malloc
          reading[:arenas] = arenas
          # everything is in place before the native reading: from it to the caller, nothing allocates
          n = @lock.synchronize { PtmallocDump._stats_fill(malloc, arenas) }
          reading[:ring_ok] = n >= 0
          return reading if n.negative?

          if n <= arenas.size
            arenas.pop while arenas.size > n
            return reading
          end

          @arena_hint = n + 4
        end
        reading
      end

      def status_figures
        figures = {}
        File.foreach("/proc/self/status") do |line|
          key, value = line.split(":", 2)
          name = STATUS_FIELDS[key] or next
          figures[name] = value.to_i * 1024
        end
        figures
      end

      def rollup_figures
        figures = {}
        File.foreach("/proc/self/smaps_rollup") do |line|
          key, value = line.split(":", 2)
          name = ROLLUP_FIELDS[key] or next
          figures[name] = value.to_i * 1024
        end
        figures
      rescue Errno::ENOENT # kernels before 4.14
        {}
      end

      def gc_figures
        stat = GC.stat
        figures = GC_KEYS.to_h { |k| [k, stat[k]] }
        figures[:page_size] = GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE] || (1 << 14)
        figures[:ruby_pages_bytes] = stat[:heap_allocated_pages] * figures[:page_size]
        figures
      end
    end
  end
end

# The first call of each method from a call site fills Ruby's call caches, which mallocs: a reading is
# taken once when this file loads (on the first use of Stats), so that later ones allocate nothing
# after glibc's counters are read.
begin
  PtmallocDump::Stats.read(smaps: true)
  PtmallocDump::Stats.read(smaps: false)
rescue PtmallocDump::Error, SystemCallError
  nil # where malloc is not glibc's, stats raises when called
end
