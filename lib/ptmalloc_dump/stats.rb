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

  class << self
    # A cheap reading of this process's memory: glibc's counters (mallinfo2), each arena's system
    # memory (main_arena's ring, followed as a dump follows it), the kernel's RSS figures and GC.stat's
    # heap figures. No chunk is walked and no file written. glibc's counters are read last, after the
    # Hash is built (and without the GVL: mallinfo2 visits every free chunk in the bins, 0.2 ms on an
    # application-shaped heap, about 100 ms on the bench heap of a million chunks; README has the
    # figures), so a
    # {dump} called right after sees the same malloc state.
    #
    # @param smaps [Boolean] also read /proc/self/smaps_rollup (Pss, private and shared pages): the
    #   kernel walks the page tables for it, 31 ms for 375 MiB resident
    # @return [Hash{Symbol=>Object}] :time (Float, Unix seconds), :pid, :malloc (mallinfo2's fields,
    #   bytes: :arena heap, :uordblks in use, :fordblks free, :hblkhd mmapped, ...), :arenas
    #   (`[{ address:, system_mem:, max_system_mem: }]`, main_arena first), :ring_ok (false when the
    #   ring does not lead back to main_arena: :malloc is then all zeros, mallinfo2 is not called),
    #   :rss (bytes: :vm_rss, :vm_hwm, :anonymous, :file_backed, :shmem, :swap and with smaps :pss,
    #   :private_dirty, :shared_clean, :shared_dirty, :rollup_rss) and :gc (GC.stat's heap figures
    #   and :ruby_pages_bytes)
    def stats(smaps: false)
      Stats.read(smaps: smaps)
    end
  end
end
